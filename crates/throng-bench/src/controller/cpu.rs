//! Which side was the bottleneck: a trace of CPU seconds (the server and
//! each of its threads, each agent, the controller, the whole machine)
//! taken every 100 ms, the CPU use over a window of it, and the verdict.

use std::time::Instant;

use super::agents::Agents;
use super::probe::ServerProbe;
use crate::report::{CpuWindow, Spread};
use crate::sys;

/// CPU seconds of the server (total and per thread) and of each agent, at `t`.
#[derive(Clone, Debug, Default)]
struct CpuPoint {
    /// Seconds since the run's start.
    t: f64,
    server: Option<f64>,
    server_threads: Vec<(u32, f64)>,
    /// Per agent: from `/proc` for local agents, else from its last progress.
    agents: Vec<f64>,
    /// This controller.
    controller: f64,
    /// The machine: (busy, total) CPU seconds over all cores.
    machine: Option<(f64, f64)>,
}

/// The run's CPU points, in time order.
#[derive(Default)]
pub(super) struct CpuTrace {
    points: Vec<CpuPoint>,
}

impl CpuTrace {
    /// Takes a point now.
    pub fn take(&mut self, start: Instant, probe: &ServerProbe, agents: &Agents) {
        self.points.push(CpuPoint {
            t: start.elapsed().as_secs_f64(),
            server: probe.proc().map(|p| p.cpu_secs),
            server_threads: probe.threads(),
            agents: agents
                .links
                .iter()
                .map(|a| {
                    a.child
                        .as_ref()
                        .and_then(|c| sys::proc_sample(&c.id().to_string()))
                        .map(|p| p.cpu_secs)
                        .or_else(|| a.last.as_ref().map(|c| c.cpu_secs))
                        .unwrap_or(0.0)
                })
                .collect(),
            controller: sys::proc_sample("self").map(|p| p.cpu_secs).unwrap_or(0.0),
            machine: sys::machine_cpu(),
        });
    }

    /// CPU use from the last point at or before `from` to the first after
    /// `until` (seconds since the start).
    pub fn window(&self, from: f64, until: f64) -> CpuWindow {
        let cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1);
        let first = self
            .points
            .iter()
            .rev()
            .find(|p| p.t <= from)
            .or(self.points.first());
        let (Some(a), Some(last)) = (first, self.points.last()) else {
            return CpuWindow {
                cores,
                ..Default::default()
            };
        };
        let b = self
            .points
            .iter()
            .find(|p| p.t >= until && p.t > a.t)
            .unwrap_or(last);
        let dt = (b.t - a.t).max(1e-3);
        let pct = |x: f64, y: f64| (y - x) / dt * 100.0;
        let server_pct = a.server.zip(b.server).map(|(x, y)| pct(x, y));
        let busiest = b
            .server_threads
            .iter()
            .map(|(tid, y)| {
                let x = a
                    .server_threads
                    .iter()
                    .find(|(t, _)| t == tid)
                    .map(|p| p.1)
                    .unwrap_or(0.0);
                pct(x, *y)
            })
            .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))));
        let agents_pct: Vec<f64> = a
            .agents
            .iter()
            .zip(&b.agents)
            .map(|(x, y)| pct(*x, *y))
            .collect();
        let controller_pct = pct(a.controller, b.controller);
        let machine_pct = match (a.machine, b.machine) {
            (Some((b0, t0)), Some((b1, t1))) if t1 > t0 => {
                Some((b1 - b0) / (t1 - t0) * cores as f64 * 100.0)
            }
            _ => None,
        };
        CpuWindow {
            window_secs: dt,
            throng_pct: server_pct.unwrap_or(0.0) + agents_pct.iter().sum::<f64>() + controller_pct,
            controller_pct,
            machine_pct,
            server_pct,
            server_busiest_thread_pct: busiest,
            server_threads: b.server_threads.len(),
            agents: Spread::of(&agents_pct),
            agents_pct,
            cores,
        }
    }
}

/// Which side limited a phase of the run (`what`), from CPU use over it.
/// `behind`: (achieved, target) rate when the run fell behind its schedule.
pub(super) fn bottleneck_of(c: &CpuWindow, what: &str, behind: Option<(f64, f64)>) -> String {
    let busiest_agent = c.agents_pct.iter().copied().fold(0.0, f64::max);
    let server = c.server_pct.unwrap_or(0.0);
    let capacity = c.cores as f64 * 100.0;
    let shares = format!(
        "server {server:.0}% (busiest of its {} threads {:.0}%), {} (% of one core, over {:.2} s)",
        c.server_threads,
        c.server_busiest_thread_pct.unwrap_or(0.0),
        Spread::of(&c.agents_pct).agents_pct(),
        c.window_secs
    );
    let machine = c.machine_pct.unwrap_or(c.throng_pct);
    let others = (machine - c.throng_pct).max(0.0);
    if c.server_busiest_thread_pct.unwrap_or(0.0) >= 90.0 {
        format!("server: a server thread was saturated; {shares}")
    } else if busiest_agent >= 90.0 {
        format!("agents: an agent was saturated (add agents); {shares}")
    } else if machine >= 0.8 * capacity || behind.is_some() {
        let side = if server >= c.throng_pct - server {
            "server"
        } else {
            "agents"
        };
        let lag = match behind {
            Some((got, want)) => format!("{what} fell behind its schedule ({got:.0} of {want:.0}/s) with no process saturated; "),
            None => String::new(),
        };
        format!(
            "the machine: {lag}its {} cores were {:.0}% of {:.0}% busy (throng {:.0}%, other processes and the kernel {:.0}%), the {side} using most of throng's share; {shares}",
            c.cores, machine, capacity, c.throng_pct, others
        )
    } else {
        format!("neither saturated: the load set the pace of {what} (machine {machine:.0}% of {capacity:.0}%); {shares}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(server: f64, busiest: f64, agents: Vec<f64>, machine: f64) -> CpuWindow {
        CpuWindow {
            window_secs: 1.0,
            server_pct: Some(server),
            server_busiest_thread_pct: Some(busiest),
            server_threads: 3,
            throng_pct: server + agents.iter().sum::<f64>(),
            agents: Spread::of(&agents),
            agents_pct: agents,
            controller_pct: 0.0,
            machine_pct: Some(machine),
            cores: 2,
        }
    }

    #[test]
    fn names_the_saturated_side() {
        let b = |w: &CpuWindow, behind| bottleneck_of(w, "the ramp-up", behind);
        assert!(b(&window(95.0, 95.0, vec![40.0], 140.0), None).starts_with("server:"));
        assert!(b(&window(40.0, 20.0, vec![95.0], 140.0), None).starts_with("agents:"));
        let m = b(&window(60.0, 30.0, vec![50.0, 50.0], 190.0), None);
        assert!(
            m.starts_with("the machine:") && m.contains("the agents"),
            "{m}"
        );
        let lag = b(
            &window(30.0, 15.0, vec![30.0], 80.0),
            Some((1000.0, 2000.0)),
        );
        assert!(
            lag.contains("fell behind its schedule (1000 of 2000/s)"),
            "{lag}"
        );
        assert!(b(&window(10.0, 5.0, vec![10.0], 30.0), None).starts_with("neither saturated"));
    }

    #[test]
    fn an_empty_trace_has_no_window() {
        let w = CpuTrace::default().window(0.0, 1.0);
        assert_eq!(w.server_pct, None);
        assert!(w.cores >= 1);
    }
}
