//! A run's own success criteria, so a CI job can gate on `throng bench`'s
//! exit status: every user the scenario starts joined, no error of any
//! kind (a refused join too: the run did not do what it was set to), and
//! every broadcast the publishers were to send was sent, and no agent went
//! away before its final report.

use super::Report;

impl Report {
    /// The criteria this run failed, one plain line each (empty: passed).
    pub fn failed_criteria(&self) -> Vec<String> {
        let mut failed = Vec::new();
        let c = &self.connections;
        if c.joined < c.target {
            let why = match &self.arrival.stopped_by_memory {
                Some(m) => format!(
                    " (the ramp-up stopped at {} connected: {} MiB available, under --min-available)",
                    m.connected,
                    m.mem_available >> 20
                ),
                None => String::new(),
            };
            failed.push(format!("{} of {} users joined{why}", c.joined, c.target));
        }
        if self.errors.total > 0 {
            let kinds: Vec<String> = self
                .errors
                .by_kind
                .iter()
                .filter(|(_, n)| **n > 0)
                .map(|(k, n)| format!("{k} {n}"))
                .collect();
            failed.push(format!(
                "{} error(s) ({})",
                self.errors.total,
                kinds.join(", ")
            ));
        }
        let b = &self.broadcast;
        if b.sent < b.expected_sent {
            failed.push(format!("{} of {} broadcasts sent", b.sent, b.expected_sent));
        }
        for l in &self.agents_lost {
            failed.push(format!(
                "agent {} (pid {}) went away during the {}: the run ended there, with the figures so far",
                l.agent, l.pid, l.phase
            ));
        }
        failed
    }
}

#[cfg(test)]
mod tests {
    use super::Report;

    #[test]
    fn a_clean_run_passes_and_each_shortfall_is_named() {
        let mut r = Report::default();
        r.connections.target = 10;
        r.connections.joined = 10;
        r.broadcast.expected_sent = 3;
        r.broadcast.sent = 3;
        assert!(r.failed_criteria().is_empty());
        r.connections.joined = 0;
        r.errors.total = 10;
        r.errors.by_kind.insert("refused".into(), 10);
        r.broadcast.sent = 0;
        assert_eq!(
            r.failed_criteria(),
            vec![
                "0 of 10 users joined".to_string(),
                "10 error(s) (refused 10)".into(),
                "0 of 3 broadcasts sent".into()
            ]
        );
        // Stopped by --min-available: the line says so.
        r.errors.total = 0;
        r.broadcast.sent = 3;
        r.connections.joined = 7;
        r.arrival.stopped_by_memory = Some(crate::report::MemoryStop {
            users_started: 7,
            connected: 7,
            mem_available: 1 << 30,
            min_available: 3 << 29,
        });
        assert_eq!(
            r.failed_criteria(),
            vec!["7 of 10 users joined (the ramp-up stopped at 7 connected: 1024 MiB available, under --min-available)".to_string()]
        );
    }
}
