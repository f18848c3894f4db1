//! The two text formats `/metrics` serves, and the choice between them by `Accept` (a pure
//! function, shared by the operations port and the metrics' renderer).

/// The two text formats `/metrics` serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsFormat {
    /// The Prometheus text format 0.0.4 (`text/plain; version=0.0.4`): the default.
    PrometheusText,
    /// OpenMetrics 1.0 (`application/openmetrics-text; version=1.0.0`).
    OpenMetrics,
}

impl MetricsFormat {
    /// The `Content-Type` of the format.
    pub fn content_type(self) -> &'static str {
        match self {
            MetricsFormat::PrometheusText => "text/plain; version=0.0.4; charset=utf-8",
            MetricsFormat::OpenMetrics => {
                "application/openmetrics-text; version=1.0.0; charset=utf-8"
            }
        }
    }

    /// The format an `Accept` header asks for: OpenMetrics when a media range
    /// `application/openmetrics-text` has a higher quality (`q`, default 1) than every range
    /// that takes plain text (`text/plain`, `text/*`, `*/*`); the Prometheus text format
    /// otherwise, and without the header.
    pub fn negotiate(accept: Option<&str>) -> Self {
        let Some(accept) = accept else {
            return MetricsFormat::PrometheusText;
        };
        let (mut open, mut text) = (0.0_f64, 0.0_f64);
        for range in accept.split(',') {
            let mut parts = range.split(';').map(str::trim);
            let media = parts.next().unwrap_or("").to_ascii_lowercase();
            let q = parts
                .filter_map(|p| p.strip_prefix("q=").or_else(|| p.strip_prefix("Q=")))
                .find_map(|q| q.trim().parse::<f64>().ok())
                .unwrap_or(1.0);
            match media.as_str() {
                "application/openmetrics-text" => open = open.max(q),
                "text/plain" | "text/*" | "*/*" => text = text.max(q),
                _ => {}
            }
        }
        if open > 0.0 && open > text {
            MetricsFormat::OpenMetrics
        } else {
            MetricsFormat::PrometheusText
        }
    }
}
