//! HTTP pages: the chat page rendered from a template inside a layout (the
//! "MVC page with no database call" of the Phoenix team's 2M-connection
//! benchmark), its bundled assets, and the
//! small fixed responses. Pages have no per-request data, so each is
//! rendered once at start into a complete response, headers included.

const LAYOUT: &str = include_str!("../templates/layout.html");
const INDEX: &str = include_str!("../templates/index.html");
const APP_JS: &str = include_str!("../assets/app.js");
const APP_CSS: &str = include_str!("../assets/app.css");

/// Fills `{{name}}` placeholders; unknown placeholders are left as they are.
pub fn render(template: &str, vars: &[(&str, &str)]) -> String {
    let mut out = String::with_capacity(template.len() + 256);
    let mut rest = template;
    while let Some(start) = rest.find("{{") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        match after.find("}}") {
            Some(end) => {
                let key = after[..end].trim();
                match vars.iter().find(|(k, _)| *k == key) {
                    Some((_, v)) => out.push_str(v),
                    None => out.push_str(&rest[start..start + 4 + end]),
                }
                rest = &after[end + 2..];
            }
            None => {
                out.push_str(&rest[start..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// A complete response, with and without its body (for HEAD).
pub(crate) struct Response {
    pub full: Box<[u8]>,
    pub head_len: usize,
}

impl Response {
    pub fn new(status: &str, content_type: &str, extra_headers: &str, body: &[u8]) -> Response {
        let head = format!(
            "HTTP/1.1 {status}\r\nServer: throng\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n{extra_headers}\r\n",
            body.len()
        );
        let mut full = Vec::with_capacity(head.len() + body.len());
        full.extend_from_slice(head.as_bytes());
        full.extend_from_slice(body);
        Response {
            head_len: head.len(),
            full: full.into_boxed_slice(),
        }
    }

    /// The bytes to send: the whole response, or its head only.
    pub fn bytes(&self, head_only: bool) -> &[u8] {
        if head_only {
            &self.full[..self.head_len]
        } else {
            &self.full
        }
    }
}

/// Every fixed response the server sends.
pub(crate) struct Pages {
    pub index: Response,
    pub app_js: Response,
    pub app_css: Response,
    /// `/healthz` (`crate::health`).
    pub healthz: Response,
    pub not_found: Response,
}

impl Pages {
    pub fn build() -> Pages {
        let html = render(LAYOUT, &[("title", "throng chat"), ("inner", INDEX)]);
        let cache = "Cache-Control: public, max-age=3600\r\n";
        Pages {
            index: Response::new("200 OK", "text/html; charset=utf-8", "", html.as_bytes()),
            app_js: Response::new("200 OK", "application/javascript", cache, APP_JS.as_bytes()),
            app_css: Response::new("200 OK", "text/css", cache, APP_CSS.as_bytes()),
            healthz: Response::new(
                "200 OK",
                "application/json",
                "Cache-Control: no-store\r\n",
                ALIVE.as_bytes(),
            ),
            not_found: Response::new("404 Not Found", "text/plain", "", b"404 Not Found\n"),
        }
    }
}

/// `/healthz`'s body.
pub const ALIVE: &str = "{\"status\":\"alive\"}\n";

/// A one-off error response that closes the connection.
pub(crate) fn error_response(
    status: u16,
    reason: &str,
    extra_headers: &str,
    body: &str,
) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status} {reason}\r\nServer: throng\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n{extra_headers}\r\n{body}",
        body.len()
    )
    .into_bytes()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_placeholders() {
        assert_eq!(
            render(
                "<t>{{title}}</t>{{ inner }}{{x}}",
                &[("title", "A"), ("inner", "B")]
            ),
            "<t>A</t>B{{x}}"
        );
        assert_eq!(render("a {{ b", &[]), "a {{ b");
    }

    #[test]
    fn index_has_layout_and_content() {
        let p = Pages::build();
        let text = String::from_utf8_lossy(&p.index.full);
        assert!(text.starts_with("HTTP/1.1 200 OK\r\n"));
        assert!(text.contains("/assets/app.js"));
        assert!(!text.contains("{{inner}}"));
        assert_eq!(p.index.bytes(true).len(), p.index.head_len);
    }
}
