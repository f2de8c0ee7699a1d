//! A `redis-server` of a test's own, on a port picked at start, with any
//! extra arguments (a password, ACL users, TLS).
#![allow(dead_code)]

pub mod cluster;

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use throng_pubsub::RedisOptions;

pub struct Redis {
    pub port: u16,
    /// What clients connect with (scheme, credentials, host and port).
    pub url: String,
    pub options: RedisOptions,
    args: Vec<String>,
    child: Option<Child>,
}

/// A port that was free a moment ago.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("a free port")
}

impl Redis {
    pub fn start() -> Redis {
        let port = free_port();
        Redis::start_with(
            port,
            vec!["--port".into(), port.to_string()],
            format!("redis://127.0.0.1:{port}"),
            RedisOptions::default(),
        )
    }

    /// Starts `redis-server` with `args` (which must set its port to
    /// `port`) and waits until a client using `url` and `options` gets PONG.
    pub fn start_with(port: u16, args: Vec<String>, url: String, options: RedisOptions) -> Redis {
        let mut r = Redis {
            port,
            url,
            options,
            args,
            child: None,
        };
        r.spawn();
        r
    }

    pub fn url(&self) -> String {
        self.url.clone()
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, |c| c.id())
    }

    pub fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .args(&self.args)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server (apt-get install redis-server; scripts/test.sh installs it)");
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match throng_pubsub::backplane::redis::check_with(&self.url, &self.options) {
                Ok(()) => break,
                Err(e) => assert!(Instant::now() < deadline, "redis-server did not start: {e}"),
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        self.stop();
    }
}

/// PING over a plain connection to 127.0.0.1:`port`.
pub fn ping(port: u16) -> Result<(), String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_millis(500)))
        .map_err(|e| e.to_string())?;
    s.write_all(b"PING\r\n").map_err(|e| e.to_string())?;
    let mut buf = [0u8; 16];
    let n = s.read(&mut buf).map_err(|e| e.to_string())?;
    if buf[..n].starts_with(b"+PONG") {
        Ok(())
    } else {
        Err(String::from_utf8_lossy(&buf[..n]).into_owned())
    }
}
