//! Whether a browser's request comes from the manager's own pages: a form posted or a
//! WebSocket opened from another site is refused. The browser says where it came from
//! (`Sec-Fetch-Site`, or else `Origin`); a client that says neither is no browser.

use axum::http::{header, HeaderMap};

pub fn same_origin(headers: &HeaderMap) -> bool {
    if let Some(site) = headers.get("sec-fetch-site") {
        return matches!(site.as_bytes(), b"same-origin" | b"none");
    }
    match (headers.get(header::ORIGIN), headers.get(header::HOST)) {
        (Some(origin), Some(host)) => origin
            .to_str()
            .ok()
            .and_then(|o| o.split_once("://"))
            .is_some_and(|(_, rest)| rest.as_bytes() == host.as_bytes()),
        (Some(_), None) => false,
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| (k.parse().unwrap(), v.parse().unwrap()))
            .collect()
    }

    #[test]
    fn another_sites_request_is_told_apart() {
        let host = ("host", "corral.example.org:8470");
        assert!(same_origin(&headers(&[
            host,
            ("origin", "https://corral.example.org:8470")
        ])));
        assert!(!same_origin(&headers(&[
            host,
            ("origin", "https://evil.example")
        ])));
        assert!(!same_origin(&headers(&[(
            "origin",
            "https://corral.example.org"
        )])));
        assert!(same_origin(&headers(&[host])));
        assert!(!same_origin(&headers(&[
            host,
            ("sec-fetch-site", "same-site")
        ])));
        assert!(same_origin(&headers(&[("sec-fetch-site", "same-origin")])));
        assert!(!same_origin(&headers(&[host, ("origin", "null")])));
        assert!(!same_origin(&headers(&[
            host,
            ("sec-fetch-site", "cross-site")
        ])));
    }
}
