//! What a run reports: the terminal summary and the offline HTML report.
//!
//! The HTML is self-contained: the run's JSON is inlined and a small script
//! draws SVG charts from it (no CDN, no external file). The live dashboard
//! serves the same page with `live` set, and the script polls `/data.json`.

use std::fmt::Write as _;

use serde_json::Value;

fn num(v: &Value) -> String {
    match v {
        Value::Null => "-".into(),
        Value::Number(n) => {
            let f = n.as_f64().unwrap_or(0.0);
            if n.is_u64() || n.is_i64() {
                group(f as i64)
            } else if f.abs() >= 100.0 {
                group(f.round() as i64)
            } else {
                format!("{f:.2}")
            }
        }
        other => other.to_string(),
    }
}

fn group(n: i64) -> String {
    let s = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

fn bytes(v: &Value) -> String {
    match v.as_f64() {
        Some(b) if b.abs() >= 1048576.0 => format!("{:.1} MiB", b / 1048576.0),
        Some(b) => format!("{b:.0} B"),
        None => "-".into(),
    }
}

/// The summary table printed at the end of a run.
pub fn summary_table(r: &Value) -> String {
    let mut s = String::new();
    let row = |s: &mut String, k: &str, v: String| {
        let _ = writeln!(s, "  {k:<34} {v}");
    };
    let _ = writeln!(
        s,
        "\n== throng bench: {} ==",
        r["scenario"]["description"].as_str().unwrap_or("?")
    );
    let c = &r["connections"];
    row(&mut s, "connections target", num(&c["target"]));
    row(&mut s, "connected (handshakes)", num(&c["connected"]));
    row(&mut s, "joined", num(&c["joined"]));
    row(
        &mut s,
        "open at plateau (server says)",
        format!(
            "{} ({})",
            num(&c["open_at_plateau"]),
            num(&c["server_conns_at_plateau"])
        ),
    );
    let a = &r["arrival"];
    row(
        &mut s,
        "arrival: joins/s achieved (target)",
        format!(
            "{} ({}), peak {} joins/s (best second), ramp {} s",
            num(&a["per_sec"]),
            num(&a["target_per_sec"]),
            num(&a["peak_per_sec"]),
            num(&a["ramp_secs"])
        ),
    );
    for (name, key) in [
        ("connect latency ms", "connect"),
        ("join latency ms", "join"),
    ] {
        let h = &r[key];
        row(
            &mut s,
            name,
            format!(
                "p50 {}  p90 {}  p99 {}  max {}",
                num(&h["p50_ms"]),
                num(&h["p90_ms"]),
                num(&h["p99_ms"]),
                num(&h["max_ms"])
            ),
        );
    }
    let b = &r["broadcast"];
    if b["sent"].as_u64().unwrap_or(0) > 0 {
        row(
            &mut s,
            "broadcasts sent / receipts",
            format!("{} / {}", num(&b["sent"]), num(&b["receivers"])),
        );
        row(
            &mut s,
            "broadcast latency ms",
            format!(
                "p50 {}  p90 {}  p99 {}  max {}",
                num(&b["p50_ms"]),
                num(&b["p90_ms"]),
                num(&b["p99_ms"]),
                num(&b["max_ms"])
            ),
        );
        row(
            &mut s,
            "time to last receiver ms",
            format!(
                "worst {}  median {}",
                num(&b["last_ms"]),
                num(&b["last_p50_ms"])
            ),
        );
    }
    let m = &r["messages"];
    row(
        &mut s,
        "messages/s out / in (clients)",
        format!("{} / {}", num(&m["out_per_sec"]), num(&m["in_per_sec"])),
    );
    let e = &r["errors"];
    let kinds: Vec<String> = e["by_kind"]
        .as_object()
        .map(|o| {
            o.iter()
                .filter(|(_, v)| v.as_u64().unwrap_or(0) > 0)
                .map(|(k, v)| format!("{k} {v}"))
                .collect()
        })
        .unwrap_or_default();
    row(
        &mut s,
        "errors",
        format!(
            "{}{}",
            num(&e["total"]),
            if kinds.is_empty() {
                String::new()
            } else {
                format!(" ({})", kinds.join(", "))
            }
        ),
    );
    let sv = &r["server"];
    row(
        &mut s,
        "server RSS per connection",
        bytes(&sv["bytes_per_conn"]),
    );
    row(
        &mut s,
        "server CPU during ramp-up",
        format!("{}% of a core", num(&sv["cpu_pct_ramp"])),
    );
    let ag = &r["agent"];
    row(
        &mut s,
        "agent RSS per connection",
        format!(
            "{} (Conn struct {} B)",
            bytes(&ag["bytes_per_conn"]),
            num(&ag["conn_struct_bytes"])
        ),
    );
    row(
        &mut s,
        "kernel Slab per connection",
        format!(
            "{} (machine-wide, both ends)",
            bytes(&r["kernel"]["bytes_per_conn"])
        ),
    );
    if let Some(b) = r["kernel"]["tcp_ehash_buckets"].as_u64() {
        let conns = r["connections"]["target"].as_u64().unwrap_or(0);
        row(
            &mut s,
            "kernel TCP hash table",
            format!(
                "{} buckets for {} sockets{}",
                group(b as i64),
                group((conns * 2) as i64),
                if r["kernel"]["private_netns"].as_bool() == Some(true) {
                    " (the run's own network namespace)"
                } else {
                    ""
                }
            ),
        );
    }
    if let Some(ps) = ag["processes"].as_array() {
        let cpus: Vec<String> = ps
            .iter()
            .map(|p| format!("{}%", num(&p["cpu_pct_ramp"])))
            .collect();
        row(
            &mut s,
            "agent CPU during ramp-up",
            format!("{} agent(s): {}", ps.len(), cpus.join(", ")),
        );
    }
    let st = &r["storm"];
    row(
        &mut s,
        "disconnect storm",
        format!(
            "{} dropped; server at 0 after {} s using {} CPU s",
            num(&st["connections"]),
            num(&st["secs_to_zero"]),
            num(&st["server_cpu_secs"])
        ),
    );
    row(
        &mut s,
        "bottleneck (ramp-up)",
        r["bottleneck"].as_str().unwrap_or("-").to_string(),
    );
    if let Some(b) = r["broadcast_bottleneck"].as_str() {
        row(&mut s, "bottleneck (broadcasts)", b.to_string());
    }
    s
}

const PAGE: &str = r##"<!doctype html>
<html><head><meta charset="utf-8"><link rel="icon" href="data:,"><title>throng bench</title>
<style>
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;background:#fafafa}
h1{font-size:20px;margin:0 0 4px} .sub{color:#666;margin-bottom:16px}
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(460px,1fr));gap:16px}
.card{background:#fff;border:1px solid #ddd;border-radius:6px;padding:12px}
.card h2{font-size:14px;margin:0 0 8px}
table{border-collapse:collapse;width:100%} td{padding:2px 6px;border-bottom:1px solid #eee} td:first-child{color:#555}
svg text{font-size:11px;fill:#555} .legend span{margin-right:12px}
</style></head><body>
<h1>throng bench</h1><div class="sub" id="sub"></div>
<div class="grid">
<div class="card"><h2>Summary</h2><table id="summary"></table></div>
<div class="card"><h2>Users and connected</h2><div id="c_users"></div></div>
<div class="card"><h2>New connections and joins per second</h2><div id="c_rate"></div></div>
<div class="card"><h2>Messages per second (clients)</h2><div id="c_msgs"></div></div>
<div class="card"><h2>CPU (% of one core)</h2><div id="c_cpu"></div></div>
<div class="card"><h2>Memory (MiB)</h2><div id="c_mem"></div></div>
<div class="card"><h2>Latency percentiles (ms)</h2><div id="c_lat"></div></div>
</div>
<script>
const LIVE = /*LIVE*/false;
let DATA = /*DATA*/null;
const COLORS = ["#1f77b4","#d62728","#2ca02c","#ff7f0e","#9467bd","#8c564b"];
function tick(v){ const a=Math.abs(v); if(a>=1e6) return (+(v/1e6).toFixed(2))+"M"; if(a>=1e4) return (+(v/1e3).toFixed(1))+"k"; return fmt(v); }
function fmt(v){ if(v===null||v===undefined) return "-"; if(typeof v==="number") return Math.abs(v)>=100?Math.round(v).toLocaleString():(+v.toFixed(2)).toString(); return String(v); }
function chart(el, series, xlabel, logx){
  const W=440,H=220,L=50,B=28,T=8,R=10;
  let xs=[],ys=[];
  series.forEach(s=>s.points.forEach(p=>{ if(p[1]!==null&&p[1]!==undefined){xs.push(p[0]);ys.push(p[1]);} }));
  if(!xs.length){ document.getElementById(el).innerHTML="<i>no data yet</i>"; return; }
  const tx = logx ? (x=>-Math.log10(Math.max(1e-4,100-x)/100)) : (x=>x);
  let x0=Math.min(...xs.map(tx)),x1=Math.max(...xs.map(tx)),y1=Math.max(...ys)*1.1||1;
  if(x1===x0)x1=x0+1;
  const X=x=>L+(tx(x)-x0)/(x1-x0)*(W-L-R), Y=y=>H-B-(y/y1)*(H-B-T);
  let g=`<svg width="${W}" height="${H}">`;
  for(let i=0;i<=4;i++){const y=y1*i/4;g+=`<line x1="${L}" x2="${W-R}" y1="${Y(y)}" y2="${Y(y)}" stroke="#eee"/><text x="${L-4}" y="${Y(y)+4}" text-anchor="end">${tick(y)}</text>`;}
  if(logx){[0,50,90,99,99.9,99.99].forEach(q=>{if(tx(q)<=x1)g+=`<text x="${X(q)}" y="${H-B+14}" text-anchor="middle">p${q}</text>`;});}
  else{for(let i=0;i<=4;i++){const x=x0+(x1-x0)*i/4;g+=`<text x="${L+(x-x0)/(x1-x0)*(W-L-R)}" y="${H-B+14}" text-anchor="middle">${fmt(x)}</text>`;}}
  g+=`<text x="${W-R}" y="${H-2}" text-anchor="end">${xlabel}</text>`;
  series.forEach((s,i)=>{const pts=s.points.filter(p=>p[1]!==null&&p[1]!==undefined).map(p=>X(p[0]).toFixed(1)+","+Y(p[1]).toFixed(1)).join(" ");
    g+=`<polyline fill="none" stroke="${COLORS[i%COLORS.length]}" stroke-width="2" points="${pts}"/>`;});
  g+="</svg><div class='legend'>"+series.map((s,i)=>`<span style="color:${COLORS[i%COLORS.length]}">&#9632; ${s.name}</span>`).join("")+"</div>";
  document.getElementById(el).innerHTML=g;
}
function render(d){
  if(!d) return;
  const tl=d.timeline||[];
  const col=k=>tl.map(s=>[s.t,s[k]]);
  document.getElementById("sub").textContent=(d.scenario&&d.scenario.description||d.scenario||"")+" — "+(d.status||"");
  chart("c_users",[{name:"users",points:col("users")},{name:"connected",points:col("connected")},{name:"joined",points:col("joined")}],"s");
  const slots=(d.arrival&&d.arrival.joins_per_100ms)||[];
  chart("c_rate",[{name:"conn/s (per sample)",points:col("conn_per_sec")},{name:"joins/s (100 ms slots)",points:slots.map((v,i)=>[i*0.1,v*10])}],"s");
  chart("c_msgs",[{name:"out/s",points:col("msgs_out_per_sec")},{name:"in/s",points:col("msgs_in_per_sec")}],"s");
  chart("c_cpu",[{name:"server",points:col("server_cpu_pct")},{name:"agents",points:col("agents_cpu_pct")}],"s");
  chart("c_mem",[{name:"server RSS",points:col("server_rss_mb")},{name:"agents RSS",points:col("agents_rss_mb")}],"s");
  const p=d.percentiles||{};
  chart("c_lat",["connect","join","broadcast"].filter(k=>p[k]&&p[k].length).map(k=>({name:k,points:p[k]})),"percentile",true);
  const rows=[];
  const add=(k,v)=>rows.push(`<tr><td>${k}</td><td>${v}</td></tr>`);
  if(d.connections){add("connections target",fmt(d.connections.target));if(d.connections.connected!==undefined){add("connected / joined",fmt(d.connections.connected)+" / "+fmt(d.connections.joined));}}
  if(d.counters){const c=d.counters;add("started / open / joined",fmt(c.started)+" / "+fmt(c.open)+" / "+fmt(c.joined));add("broadcast receipts",fmt(c.bcast_recv));}
  if(d.arrival){add("joins/s achieved",fmt(d.arrival.per_sec));}
  if(d.join&&d.join.count){add("join p50 / p99 ms",fmt(d.join.p50_ms)+" / "+fmt(d.join.p99_ms));}
  if(d.broadcast&&d.broadcast.receivers){const b=d.broadcast;add("broadcast p50 / p99 / max ms",fmt(b.p50_ms)+" / "+fmt(b.p99_ms)+" / "+fmt(b.max_ms));add("time to last receiver ms",fmt(b.last_ms));}
  if(d.errors){add("errors",fmt(d.errors.total)+" "+JSON.stringify(Object.fromEntries(Object.entries(d.errors.by_kind||{}).filter(e=>e[1]>0))));}
  if(d.server&&d.server.bytes_per_conn!==undefined){add("server bytes / connection",fmt(d.server.bytes_per_conn));add("server CPU % (ramp-up)",fmt(d.server.cpu_pct_ramp));}
  if(d.agent){add("agent bytes / connection",fmt(d.agent.bytes_per_conn));}
  if(d.storm){add("disconnect storm: s to 0 / server CPU s",fmt(d.storm.secs_to_zero)+" / "+fmt(d.storm.server_cpu_secs));}
  if(d.bottleneck){add("bottleneck (ramp-up)",d.bottleneck);}
  if(d.broadcast_bottleneck){add("bottleneck (broadcasts)",d.broadcast_bottleneck);}
  document.getElementById("summary").innerHTML=rows.join("");
}
render(DATA);
if(LIVE){ setInterval(()=>fetch("/data.json").then(r=>r.json()).then(d=>{DATA=d;render(d);}).catch(()=>{}),1000); }
</script></body></html>
"##;

/// The HTML page: the report (`live = false`, data inlined) or the live dashboard.
pub fn html(data: &Value, live: bool) -> String {
    // `</` cannot end the script early once escaped.
    let json = serde_json::to_string(data)
        .unwrap_or_else(|_| "null".into())
        .replace("</", "<\\/");
    PAGE.replace("/*LIVE*/false", if live { "true" } else { "false" })
        .replace("/*DATA*/null", &json)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn html_is_self_contained() {
        let d = json!({"scenario": {"description": "x</script>"}, "timeline": [{"t": 1.0, "users": 5}]});
        let page = html(&d, false);
        assert!(
            !page.contains("http://") && !page.contains("https://"),
            "no external resources"
        );
        assert!(page.contains("x<\\/script>"));
        assert!(page.contains("const LIVE = false"));
        assert!(html(&d, true).contains("const LIVE = true"));
    }

    #[test]
    fn numbers_read_well() {
        assert_eq!(num(&json!(1234567)), "1,234,567");
        assert_eq!(num(&json!(1.234)), "1.23");
        assert_eq!(num(&json!(1234.5)), "1,235");
        assert_eq!(num(&Value::Null), "-");
        assert!(summary_table(&json!({})).contains("connections target"));
    }
}
