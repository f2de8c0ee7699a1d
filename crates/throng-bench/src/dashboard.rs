//! The live dashboard: a tiny HTTP server (default port 8091, as Tsung's)
//! serving the report page in live mode and the run's current JSON at
//! `/data.json`, which the page polls every second.
//!
//! It runs on its own thread and only reads the snapshot the controller
//! replaces once a second, so a slow browser cannot stall the run.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::report::html;

/// Binds the dashboard's listener on 127.0.0.1:`port` (0 picks one);
/// [`serve`] serves on it.
pub fn bind(port: u16) -> std::io::Result<TcpListener> {
    TcpListener::bind(("127.0.0.1", port))
}

/// Serves the dashboard on `listener` (bound by [`bind`] in the host's
/// network namespace, before a run moves into its own).
pub fn serve(listener: TcpListener, data: Arc<Mutex<String>>) -> std::io::Result<SocketAddr> {
    let addr = listener.local_addr()?;
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let _ = handle(stream, &data);
        }
    });
    Ok(addr)
}

fn handle(mut s: TcpStream, data: &Arc<Mutex<String>>) -> std::io::Result<()> {
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut buf = [0u8; 4096];
    let mut n = 0;
    while n < buf.len() && !buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
        match s.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    let req = String::from_utf8_lossy(&buf[..n]);
    let path = req.split_whitespace().nth(1).unwrap_or("/");
    let snapshot = || data.lock().unwrap_or_else(|p| p.into_inner()).clone();
    let (status, ctype, body) = match path {
        "/" | "/index.html" => (
            "200 OK",
            "text/html; charset=utf-8",
            html::page(&snapshot(), true),
        ),
        "/data.json" => ("200 OK", "application/json", snapshot()),
        _ => ("404 Not Found", "text/plain", "not found\n".to_string()),
    };
    write!(
        s,
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serves_page_and_json() {
        let data = Arc::new(Mutex::new(
            r#"{"status": "ramp-up", "timeline": []}"#.to_string(),
        ));
        let addr = serve(bind(0).unwrap(), Arc::clone(&data)).unwrap();
        let page = crate::sys::http_get(addr, "/", Duration::from_secs(2)).unwrap();
        assert!(page.contains("const LIVE = true"));
        let json = crate::sys::http_get(addr, "/data.json", Duration::from_secs(2)).unwrap();
        assert_eq!(
            serde_json::from_str::<serde_json::Value>(&json).unwrap()["status"],
            "ramp-up"
        );
        assert!(crate::sys::http_get(addr, "/nope", Duration::from_secs(2)).is_err());
    }
}
