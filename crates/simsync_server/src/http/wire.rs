//! HTTP/1.x on the operations port, as plain data and pure functions: a request head read
//! with `httparse` ([`parse_head`]) and an answer written out ([`Answer::encode`]); the
//! `/metrics` format is chosen from `Accept` by
//! [`MetricsFormat::negotiate`](crate::metrics_format::MetricsFormat::negotiate).

/// The most header lines a request may have.
const MAX_HEADERS: usize = 32;

/// What the server reads of a request head.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// `GET`, `POST`... as sent.
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// The `Authorization` header, if any.
    pub authorization: Option<String>,
    /// The `Accept` header, if any.
    pub accept: Option<String>,
    /// The `Content-Length`, if any.
    pub content_length: Option<usize>,
    /// Whether the body is sent with `Transfer-Encoding` (chunked): refused on this port.
    pub transfer_encoded: bool,
    /// Bytes of the head (the body, if any, starts there).
    pub len: usize,
}

/// The outcome of reading the bytes received so far.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HeadParse {
    /// The head is not complete yet.
    Partial,
    /// A complete head.
    Done(Head),
    /// Not HTTP, or a head the server refuses (why, for a `400`).
    Bad(&'static str),
}

/// Reads the request head at the start of `bytes`.
pub fn parse_head(bytes: &[u8]) -> HeadParse {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    let len = match request.parse(bytes) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return HeadParse::Partial,
        Err(httparse::Error::TooManyHeaders) => return HeadParse::Bad("too many header lines"),
        Err(_) => return HeadParse::Bad("not an HTTP/1.x request"),
    };
    let text = |name: &str| {
        request
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .and_then(|h| std::str::from_utf8(h.value).ok())
            .map(|v| v.trim().to_string())
    };
    let content_length = match text("Content-Length") {
        None => None,
        Some(value) => match value.parse::<usize>() {
            Ok(n) => Some(n),
            Err(_) => return HeadParse::Bad("a Content-Length that is not a number"),
        },
    };
    let path = request.path.unwrap_or("/");
    HeadParse::Done(Head {
        method: request.method.unwrap_or("").to_string(),
        path: path.split('?').next().unwrap_or("").to_string(),
        authorization: text("Authorization"),
        accept: text("Accept"),
        content_length,
        transfer_encoded: text("Transfer-Encoding").is_some(),
        len,
    })
}

/// An answer: status, content type, extra headers and body. Every answer closes the
/// connection (`Connection: close`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The HTTP status.
    pub status: u16,
    /// The `Content-Type`.
    pub content_type: &'static str,
    /// More headers (`Allow` on a `405`).
    pub headers: Vec<(&'static str, String)>,
    /// The body.
    pub body: Vec<u8>,
}

impl Answer {
    /// A plain-text answer.
    pub fn text(status: u16, body: impl Into<String>) -> Self {
        Self {
            status,
            content_type: "text/plain; charset=utf-8",
            headers: Vec::new(),
            body: body.into().into_bytes(),
        }
    }

    /// A JSON answer.
    pub fn json(status: u16, body: &serde_json::Value) -> Self {
        Self {
            status,
            content_type: "application/json",
            headers: Vec::new(),
            body: body.to_string().into_bytes(),
        }
    }

    /// The bytes on the wire; `head_only` leaves the body out (a `HEAD` request) but keeps its
    /// `Content-Length`.
    pub fn encode(&self, head_only: bool) -> Vec<u8> {
        let mut out = format!(
            "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\nConnection: close\r\n",
            self.status,
            reason_phrase(self.status),
            self.content_type,
            self.body.len()
        );
        for (name, value) in &self.headers {
            out.push_str(&format!("{name}: {value}\r\n"));
        }
        out.push_str("\r\n");
        let mut bytes = out.into_bytes();
        if !head_only {
            bytes.extend_from_slice(&self.body);
        }
        bytes
    }
}

/// The reason phrase of the statuses this port answers.
fn reason_phrase(status: u16) -> &'static str {
    match status {
        200 => "OK",
        201 => "Created",
        400 => "Bad Request",
        401 => "Unauthorized",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        409 => "Conflict",
        411 => "Length Required",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics_format::MetricsFormat;

    #[test]
    fn a_head_is_read_once_complete_with_the_headers_the_port_uses() {
        let full =
            b"POST /rooms?x=1 HTTP/1.1\r\nauthorization: bearer t\r\nContent-Length: 12\r\n\r\n{}";
        assert_eq!(parse_head(&full[..30]), HeadParse::Partial);
        let HeadParse::Done(head) = parse_head(full) else {
            panic!("a complete head")
        };
        assert_eq!(
            (head.method.as_str(), head.path.as_str()),
            ("POST", "/rooms")
        );
        assert_eq!(head.authorization.as_deref(), Some("bearer t"));
        assert_eq!(head.content_length, Some(12));
        assert_eq!(head.len, full.len() - 2);
        assert!(!head.transfer_encoded);
    }

    #[test]
    fn bad_heads_are_refused_with_why() {
        assert!(matches!(
            parse_head(b"\x16\x03\x01garbage\r\n\r\n"),
            HeadParse::Bad(_)
        ));
        assert_eq!(
            parse_head(b"GET / HTTP/1.1\r\nContent-Length: lots\r\n\r\n"),
            HeadParse::Bad("a Content-Length that is not a number")
        );
        let many: String = (0..40).map(|i| format!("X-{i}: 1\r\n")).collect();
        assert_eq!(
            parse_head(format!("GET / HTTP/1.1\r\n{many}\r\n").as_bytes()),
            HeadParse::Bad("too many header lines")
        );
    }

    #[test]
    fn an_answer_closes_and_a_head_answer_has_no_body() {
        let answer = Answer::text(200, "ok\n");
        let wire = String::from_utf8(answer.encode(false)).unwrap();
        assert!(wire.starts_with("HTTP/1.1 200 OK\r\n"), "{wire}");
        assert!(wire.contains("Content-Length: 3\r\n"), "{wire}");
        assert!(wire.contains("Connection: close\r\n"), "{wire}");
        assert!(wire.ends_with("\r\n\r\nok\n"), "{wire}");
        let head = String::from_utf8(answer.encode(true)).unwrap();
        assert!(
            head.ends_with("Content-Length: 3\r\nConnection: close\r\n\r\n"),
            "{head}"
        );
    }

    #[test]
    fn the_metrics_format_follows_accept_qualities() {
        use MetricsFormat::*;
        assert_eq!(MetricsFormat::negotiate(None), PrometheusText);
        assert_eq!(MetricsFormat::negotiate(Some("*/*")), PrometheusText);
        assert_eq!(
            MetricsFormat::negotiate(Some("application/openmetrics-text")),
            OpenMetrics
        );
        // What Prometheus sends by default: OpenMetrics first.
        let prometheus = "application/openmetrics-text;version=1.0.0;q=0.5,application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2";
        assert_eq!(MetricsFormat::negotiate(Some(prometheus)), OpenMetrics);
        // Plain text preferred, or OpenMetrics refused.
        assert_eq!(
            MetricsFormat::negotiate(Some(
                "text/plain;version=0.0.4, application/openmetrics-text;q=0.5"
            )),
            PrometheusText
        );
        assert_eq!(
            MetricsFormat::negotiate(Some("application/openmetrics-text;q=0")),
            PrometheusText
        );
    }
}
