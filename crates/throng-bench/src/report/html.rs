//! The HTML report: one self-contained page. The run's JSON (a
//! [`Report`](super::Report)) is inlined and a small script draws SVG
//! charts from it (no CDN, no external file). The live dashboard serves the
//! same page with `live` set, and the script polls `/data.json` for
//! [`Live`](super::Live) snapshots, then the report. A soak's report
//! (`crate::soak::SoakReport`, `"scenario": "soak"`) is drawn by its own
//! part of the script: a card per series, each worker's line beside the
//! sum, the fit over the second half, and why a series failed.

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
<div class="card"><h2>Bytes per second to clients (MB/s)</h2><div id="c_bytes"></div></div>
<div class="card"><h2>CPU (% of one core)</h2><div id="c_cpu"></div></div>
<div class="card"><h2>Memory (MiB)</h2><div id="c_mem"></div></div>
<div class="card"><h2>Latency percentiles (ms)</h2><div id="c_lat"></div></div>
</div>
<div class="grid" id="soak" style="display:none"></div>
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
function soakChart(s, w){
  const W=440,H=200,L=64,B=28,T=8,R=10;
  const lines=[{name:"all",points:s.points||[]}].concat(Object.keys(s.workers||{}).map(k=>({name:k,points:s.workers[k]})));
  let xs=[],ys=[];
  lines.forEach(l=>l.points.forEach(p=>{xs.push(p[0]);ys.push(p[1]);}));
  if(!xs.length) return "<i>no samples</i>";
  let x0=Math.min(...xs),x1=Math.max(...xs),y0=Math.min(...ys),y1=Math.max(...ys);
  if(x1===x0)x1=x0+1;
  if(y1===y0){y0-=1;y1+=1;}
  const pad=(y1-y0)*0.05;y0-=pad;y1+=pad;
  const X=x=>L+(x-x0)/(x1-x0)*(W-L-R), Y=y=>H-B-(y-y0)/(y1-y0)*(H-B-T);
  let g=`<svg width="${W}" height="${H}">`;
  for(let i=0;i<=4;i++){const y=y0+(y1-y0)*i/4;g+=`<line x1="${L}" x2="${W-R}" y1="${Y(y)}" y2="${Y(y)}" stroke="#eee"/><text x="${L-4}" y="${Y(y)+4}" text-anchor="end">${tick(y)}</text>`;}
  for(let i=0;i<=4;i++){const x=x0+(x1-x0)*i/4;g+=`<text x="${X(x)}" y="${H-B+14}" text-anchor="middle">${fmt(x)}</text>`;}
  g+=`<text x="${W-R}" y="${H-2}" text-anchor="end">s</text>`;
  [[w.from,"second half"],[w.stopped,"stop"]].forEach(([x,label])=>{if(x>=x0&&x<=x1){g+=`<line x1="${X(x)}" x2="${X(x)}" y1="${T}" y2="${H-B}" stroke="#bbb" stroke-dasharray="4 3"/><text x="${X(x)+3}" y="${T+10}">${label}</text>`;}});
  lines.slice().reverse().forEach((l,j)=>{const i=lines.length-1-j;const pts=l.points.map(p=>X(p[0]).toFixed(1)+","+Y(p[1]).toFixed(1)).join(" ");
    g+=`<polyline fill="none" stroke="${COLORS[i%COLORS.length]}" stroke-width="${i===0?2:1}" points="${pts}"/>`;});
  const v=s.verdict;
  if(v){g+=`<line x1="${X(w.from)}" x2="${X(w.to)}" y1="${Y(v.line_start)}" y2="${Y(v.line_end)}" stroke="${v.grew?"#d62728":"#000"}" stroke-width="1.5" stroke-dasharray="6 3"/>`;}
  g+="</svg><div class='legend'>"+lines.map((l,i)=>`<span style="color:${COLORS[i%COLORS.length]}">&#9632; ${l.name}</span>`).join("")+(v?"<span>- - fit over the second half</span>":"")+"</div>";
  return g;
}
function renderSoak(d){
  document.querySelectorAll(".grid")[0].style.display="none";
  const box=document.getElementById("soak");box.style.display="";
  const esc=v=>String(v).replace(/&/g,"&amp;").replace(/</g,"&lt;");
  const c=d.clients||{},w=d.windows||{};
  document.getElementById("sub").textContent="soak: "+fmt(d.duration_secs)+" s, "+fmt(d.population)+" sessions churned at "+fmt(d.churn_per_sec)+"/s, "+d.workers+" worker(s)"+(d.redis?" on Redis":"")+" — "+(d.passed?"passed":"FAILED");
  const rows=[];const add=(k,v)=>rows.push(`<tr><td>${k}</td><td>${esc(v)}</td></tr>`);
  add("result",d.passed?"passed: nothing grew, every count came back once the clients left, the load was held":"FAILED");
  (d.grew||[]).forEach(g=>add("grew",g));
  (d.load_missed||[]).forEach(g=>add("load not held",g));
  add("sessions",fmt(c.connects)+" ("+fmt(c.longpoll_sessions)+" long-poll), "+fmt(c.connect_errors)+" connect errors");
  add("joins / rejoins with since",fmt(c.joins)+" ("+fmt(c.join_errors)+" refused) / "+fmt((c.recovered||0)+(c.not_recovered||0))+" ("+fmt(c.recovered)+" recovered)");
  add("leaves / pushes / heartbeats",fmt(c.leaves)+" / "+fmt(c.pushes)+" ("+fmt(c.push_ok)+" ok) / "+fmt(c.heartbeats));
  add("ends","close "+fmt(c.ended_close)+", reset "+fmt(c.ended_reset)+", dropped "+fmt(c.ended_drop)+", long-poll expired "+fmt(c.ended_longpoll_expire)+", long-poll cut "+fmt(c.ended_longpoll_cut)+", server API disconnects "+fmt(c.server_disconnects)+", other server closes "+fmt(c.server_closes));
  add("client errors",fmt(c.errors)+(c.first_error?" (first: "+c.first_error+")":""));
  Object.entries(c.error_kinds||{}).forEach(([k,n])=>add("&nbsp;&nbsp;"+fmt(n)+" x",k));
  add("server API",Object.entries(d.api||{}).map(([k,v])=>k+" "+v.ok+"/"+(v.ok+v.errors)).join(", "));
  add("app backend requests",Object.entries(d.backend||{}).map(([k,v])=>k+" "+v).join(", "));
  add("second half / stop / last sample",fmt(w.from)+"-"+fmt(w.to)+" s / "+fmt(w.stopped)+" s / "+fmt(w.last)+" s; population noise "+fmt((d.population_noise||0)*100)+"%");
  add("server",(d.server_args||[]).join(" "));
  let html=`<div class="card"><h2>Summary</h2><table>${rows.join("")}</table></div>`;
  (d.series||[]).forEach(s=>{const v=s.verdict;
    const how=v?(v.grew?"<b style='color:#d62728'>"+esc(v.why||"grew")+"</b>":(v.kind==="memory"?fmt(v.growth_pct)+"% over the second half":"slope "+fmt(v.slope_per_hour)+"/h, band "+fmt(v.band))+(v.before!==null&&v.before!==undefined?"; before "+fmt(v.before)+", after "+fmt(v.after):"")):"";
    html+=`<div class="card"><h2>${esc(s.name)}</h2><div class="sub">${how}</div>${soakChart(s,w)}</div>`;});
  box.innerHTML=html;
}
function render(d){
  if(!d) return;
  if(d.scenario==="soak"){ renderSoak(d); return; }
  const tl=d.timeline||[];
  const col=k=>tl.map(s=>[s.t,s[k]]);
  document.getElementById("sub").textContent=(d.scenario&&d.scenario.description||d.scenario||"")+" — "+(d.status||"");
  chart("c_users",[{name:"users",points:col("users")},{name:"connected",points:col("connected")},{name:"joined",points:col("joined")}],"s");
  const slots=(d.arrival&&d.arrival.joins_per_100ms)||[];
  const steps=(d.arrival&&d.arrival.adaptive&&d.arrival.adaptive.steps)||[];
  const rate=[];steps.forEach((st,i)=>{if(i>0)rate.push([st.t,steps[i-1].per_sec]);rate.push([st.t,st.per_sec]);});
  const rateSeries=[{name:"conn/s (per sample)",points:col("conn_per_sec")},{name:"joins/s (100 ms slots)",points:slots.map((v,i)=>[i*0.1,v*10])}];
  if(rate.length){rateSeries.push({name:"adaptive rate chosen",points:rate});}
  chart("c_rate",rateSeries,"s");
  chart("c_msgs",[{name:"out/s",points:col("msgs_out_per_sec")},{name:"in/s",points:col("msgs_in_per_sec")}],"s");
  const mb=k=>tl.map(s=>[s.t,(s[k]||0)/1e6]);
  chart("c_bytes",[{name:"all messages",points:mb("bytes_in_per_sec")},{name:"presence",points:mb("presence_bytes_in_per_sec")}],"s");
  chart("c_cpu",[{name:"server",points:col("server_cpu_pct")},{name:"agents",points:col("agents_cpu_pct")}],"s");
  chart("c_mem",[{name:"server RSS",points:col("server_rss_mb")},{name:"agents RSS",points:col("agents_rss_mb")}],"s");
  const p=d.percentiles||{};
  chart("c_lat",["connect","join","broadcast","presence_join_visible"].filter(k=>p[k]&&p[k].length).map(k=>({name:k==="presence_join_visible"?"join visible to all":k,points:p[k]})),"percentile",true);
  const rows=[];
  const esc=v=>String(v).replace(/&/g,"&amp;").replace(/</g,"&lt;");
  const add=(k,v)=>rows.push(`<tr><td>${k}</td><td>${esc(v)}</td></tr>`);
  const spread=(a)=>{a=(a||[]).filter(x=>x!==null&&x!==undefined);if(!a.length)return "-";const sum=a.reduce((x,y)=>x+y,0);return a.length===1?fmt(sum)+"%":fmt(sum)+"% ("+a.length+" agents: mean "+fmt(sum/a.length)+"%, max "+fmt(Math.max(...a))+"%)";};
  if(d.failures){add("result",d.failures.length?"FAILED: "+d.failures.join("; "):"passed: every user joined, no error, every broadcast sent");}
  if(d.verdict){add("verdict",d.verdict);}
  if(d.connections){add("connections target",fmt(d.connections.target));if(d.connections.connected!==undefined){add("connected / joined",fmt(d.connections.connected)+" / "+fmt(d.connections.joined));}}
  if(d.counters){const c=d.counters;add("started / open / joined",fmt(c.started)+" / "+fmt(c.open)+" / "+fmt(c.joined));add("broadcast receipts",fmt(c.bcast_recv));}
  if(d.arrival){add("joins/s achieved",fmt(d.arrival.per_sec));const ad=d.arrival.adaptive;if(ad){add("adaptive arrival",fmt(ad.start_per_sec)+" -> "+fmt(ad.max_per_sec)+"/s, "+"lowered "+ad.cuts+" time(s) as handshakes queued; sustained "+(ad.sustainable_per_sec===null?"no limit found":fmt(ad.sustainable_per_sec)+"/s")+": "+ad.limited_by);}}
  if(d.join&&d.join.count){add("join p50 / p99 ms",fmt(d.join.p50_ms)+" / "+fmt(d.join.p99_ms));}
  if(d.broadcast&&d.broadcast.receivers){const b=d.broadcast;add("broadcast p50 / p99 / max ms",fmt(b.p50_ms)+" / "+fmt(b.p99_ms)+" / "+fmt(b.max_ms));add("time to last receiver ms",fmt(b.last_ms)+" worst, "+fmt(b.last_p50_ms)+" median");
    if(d.floor){const f=d.floor;add("floor (same fan-out, no server) ms",fmt(f.last_p50_ms)+" median, "+fmt(f.last_ms)+" worst; rounds "+(f.rounds_last_ms||[]).map(fmt).join(", ")+(f.heartbeats_per_sec>0?"; over "+fmt(f.heartbeats_per_sec)+" heartbeats/s, answered":"")+((f.train_last_ms||[]).length?"; on the broadcasts' schedule ("+fmt(f.train_interval_secs)+" s apart): "+f.train_last_ms.map(fmt).join(", "):""));
      add("last receiver / floor",(b.floor_ratio===null?"-":b.floor_ratio.toFixed(2)+"x")+" median, "+(b.floor_ratio_worst===null?"-":b.floor_ratio_worst.toFixed(2)+"x")+" worst: "+(b.floor_compared||""));
      add("CPU per receiver us","server "+fmt(b.server_cpu_us_per_receiver)+", agents "+fmt(b.agent_cpu_us_per_receiver)+"; floor writers "+fmt(f.writer_cpu_us_per_receiver)+", agents "+fmt(f.reader_cpu_us_per_receiver));}}
  if(d.presence){const pr=d.presence;const tr=t=>fmt(t.messages)+" msgs ("+fmt(t.messages_per_sec)+"/s), "+fmt(t.bytes)+" B ("+fmt(t.bytes_per_sec)+" B/s)";
    add("presence",(pr.rule||"no rule")+(pr.mode?" ("+pr.mode+")":"")+((pr.server_args||[]).length?"; embedded server: "+pr.server_args.join(" "):""));
    add("presence_state / presence_diff / presence_count",tr(pr.state)+" / "+tr(pr.diff)+" / "+tr(pr.count));
    add("other messages",tr(pr.other)+" over "+fmt(pr.window_secs)+" s");
    add("presence per join",fmt(pr.messages_per_join)+" msgs, "+fmt(pr.bytes_per_join)+" B ("+fmt(pr.joins)+" joins)");
    if(pr.rule){const v=pr.join_visible;add("join visible to all subscribers ms","p50 "+fmt(v.p50_ms)+" / p99 "+fmt(v.p99_ms)+" / max "+fmt(v.max_ms)+" ("+fmt(v.count)+" seen, "+fmt(pr.join_visible_unseen)+" unseen)");}}
  if(d.arrival&&d.arrival.server_cpu_us_per_join!==undefined){add("server CPU per join us",fmt(d.arrival.server_cpu_us_per_join));}
  if(d.messages&&d.messages.bytes_in!==undefined){add("bytes to clients / per join",fmt(d.messages.bytes_in)+" / "+fmt(d.messages.bytes_in_per_join));}
  if(d.errors){add("errors",fmt(d.errors.total));(d.errors.attributed||[]).forEach(a=>add("&nbsp;&nbsp;"+a.kind+" ("+a.whose+")",fmt(a.count)+": "+a.why));}
  if(d.heartbeats&&d.heartbeats.interval_secs){add("heartbeats (background)","every "+fmt(d.heartbeats.interval_secs)+" s, spread evenly"+(d.heartbeats.grid_secs?" on a "+fmt(d.heartbeats.grid_secs)+" s grid":"")+": "+fmt(d.heartbeats.per_sec_at_hold)+"/s while held, at most "+fmt(d.heartbeats.late_max_ms||0)+" ms late");}
  if(d.os&&d.os.settings){add("OS settings",(d.os.tuned?"throng tune's":"the host's")+((d.os.lacking||[]).length?"; lacked "+d.os.lacking.map(l=>l.name).join(", ")+": run "+d.os.advice:""));}
  if(d.kernel&&d.kernel.backlog_drops!==null&&d.kernel.backlog_drops!==undefined){const m=(d.os&&d.os.settings&&d.os.settings["net.core.netdev_max_backlog"])||"?";add("kernel input backlog drops",fmt(d.kernel.backlog_drops)+" (net.core.netdev_max_backlog "+m+")"+(d.kernel.backlog_drops>0?": the kernel's; TCP resent each 200 ms or more later; sysctl -w net.core.netdev_max_backlog=262144 raises it":""));}
  if(d.cpu&&d.cpu.ramp){add("agent CPU during ramp-up",spread(d.cpu.ramp.agents_pct));}
  if(d.server&&d.server.bytes_per_conn!==undefined){add("server bytes / connection",fmt(d.server.bytes_per_conn));add("server private bytes / connection",fmt(d.server.private_bytes_per_conn));add("server PSS bytes / connection",fmt(d.server.pss_bytes_per_conn));add("server CPU % (ramp-up)",fmt(d.server.cpu_pct_ramp));}
  if(d.server&&d.server.auth==="jwt"){add("auth","jwt: each socket its own user's token");}
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

/// The HTML page: the report (`live = false`, `json` inlined) or the live
/// dashboard (`json` is its first snapshot).
pub fn page(json: &str, live: bool) -> String {
    // `</` cannot end the script early once escaped.
    let json = json.replace("</", "<\\/");
    PAGE.replace("/*LIVE*/false", if live { "true" } else { "false" })
        .replace("/*DATA*/null", &json)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_is_self_contained() {
        let d =
            r#"{"scenario": {"description": "x</script>"}, "timeline": [{"t": 1.0, "users": 5}]}"#;
        let report = page(d, false);
        assert!(
            !report.contains("http://") && !report.contains("https://"),
            "no external resources"
        );
        assert!(report.contains("x<\\/script>"));
        assert!(report.contains("const LIVE = false"));
        assert!(page(d, true).contains("const LIVE = true"));
    }

    #[test]
    fn a_soak_report_is_drawn_by_its_own_renderer() {
        let report = page(r#"{"scenario": "soak", "series": []}"#, false);
        assert!(report.contains(r#"if(d.scenario==="soak"){ renderSoak(d); return; }"#));
        assert!(report.contains(r#"id="soak""#));
    }
}
