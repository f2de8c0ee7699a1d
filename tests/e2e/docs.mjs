// The documentation as the tests read it: README.md and every page of
// docs/, split into sections by their headings (a `#` line inside a fenced
// block is not one), each with its fenced blocks. A test finds a section by
// its heading line wherever the docs keep it, so a section can move from
// one page to another without the test changing; headings the tests use
// must be unique across the files. A command block (a fence tagged `sh`)
// may carry a note on the line before it, an HTML comment: `<!-- run by
// tests/e2e/FILE.test.mjs -->` (another test runs it) or `<!-- not run by
// the tests: REASON -->` (see docs/contributing.md).
import assert from "node:assert/strict"
import {readFileSync, readdirSync} from "node:fs"
import path from "node:path"
import {REPO_ROOT} from "./helpers.mjs"

/** README.md, then docs/*.md in name order: the files whose commands the tests run. */
export const DOC_FILES = ["README.md", ...readdirSync(path.join(REPO_ROOT, "docs"))
  .filter(f => f.endsWith(".md")).sort().map(f => `docs/${f}`)]

/** The languages a command block may be tagged with. */
export const COMMAND_LANGS = new Set(["sh", "bash", "shell", "console"])

/**
 * One file's headings and fenced blocks, in order: [{kind: "heading",
 * level, title, line}, {kind: "block", lang, text, line, note}], `title`
 * being the heading line as written (`## Server API`), `note` the HTML
 * comment on the line before a block's fence, or null.
 */
export function parseDoc(file){
  const lines = readFileSync(path.join(REPO_ROOT, file), "utf8").split("\n")
  const items = []
  for(let i = 0; i < lines.length; i++){
    const fence = lines[i].match(/^(\s*)```(.*)$/)
    if(fence){
      const indent = fence[1].length
      const start = i
      const body = []
      for(i++; i < lines.length && !/^\s*```\s*$/.test(lines[i]); i++){ body.push(lines[i].slice(indent)) }
      assert.ok(i < lines.length, `${file}:${start + 1}: a fence that is never closed`)
      const before = lines[start - 1]?.trim() ?? ""
      const note = /^<!--.*-->$/.test(before) ? before.slice(4, -3).trim() : null
      items.push({kind: "block", lang: fence[2].trim(), text: body.join("\n") + "\n", line: start + 1, note})
      continue
    }
    const heading = lines[i].match(/^(#+) \S/)
    if(heading){ items.push({kind: "heading", level: heading[1].length, title: lines[i], line: i + 1}) }
  }
  return items
}

const parsed = new Map()
const doc = file => parsed.get(file) ?? parsed.set(file, parseDoc(file)).get(file)

/**
 * Every section of every doc file: {file, title, level, line, blocks},
 * a section's blocks being those up to the next heading of its level or
 * higher (its subsections' included).
 */
export function sections(){
  const out = []
  for(const file of DOC_FILES){
    const items = doc(file)
    items.forEach((h, i) => {
      if(h.kind !== "heading"){ return }
      const blocks = []
      for(const it of items.slice(i + 1)){
        if(it.kind === "heading" && it.level <= h.level){ break }
        if(it.kind === "block"){ blocks.push(it) }
      }
      out.push({file, title: h.title, level: h.level, line: h.line, blocks})
    })
  }
  return out
}

/** The one section whose heading line is `title` (e.g. `## Server API`), in whichever file holds it. */
export function section(title){
  const found = sections().filter(s => s.title === title)
  assert.equal(found.length, 1, `the docs (${DOC_FILES.join(", ")}) have ${found.length} sections titled ${JSON.stringify(title)}, not one`)
  return found[0]
}

/** Every command block of the docs, each with its file and the heading of the section it is directly in. */
export function commandBlocks(){
  const out = []
  for(const file of DOC_FILES){
    let heading = null
    for(const it of doc(file)){
      if(it.kind === "heading"){ heading = it.title }
      if(it.kind === "block" && COMMAND_LANGS.has(it.lang)){ out.push({file, heading, ...it}) }
    }
  }
  return out
}

/** Every fenced block of the docs that has no language tag: {file, line}. */
export function untaggedBlocks(){
  return DOC_FILES.flatMap(file => doc(file).filter(it => it.kind === "block" && it.lang === "").map(it => ({file, line: it.line})))
}
