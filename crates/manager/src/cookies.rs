//! A request's cookies: one read by name, or some taken off before the request goes on.

use axum::http::{header, HeaderMap, HeaderValue};

/// The value of the cookie `name`, if the request has it.
pub fn value(headers: &HeaderMap, name: &str) -> Option<String> {
    pairs(headers)
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v.to_string())
}

fn pairs(headers: &HeaderMap) -> impl Iterator<Item = (&str, &str)> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
}

/// Takes the cookies named off the request, keeping the others in one `Cookie` header.
pub fn drop(headers: &mut HeaderMap, names: &[&str]) {
    let kept: Vec<String> = pairs(headers)
        .filter(|(n, _)| !names.contains(n))
        .map(|(n, v)| format!("{n}={v}"))
        .collect();
    headers.remove(header::COOKIE);
    if let Ok(value) = HeaderValue::from_str(&kept.join("; ")) {
        if !kept.is_empty() {
            headers.insert(header::COOKIE, value);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_managers_cookies_are_taken_off_and_the_apps_kept() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            "_xsrf=a; corral_app=p; x=1".parse().unwrap(),
        );
        headers.append(header::COOKIE, "corral_token=t".parse().unwrap());
        drop(&mut headers, &["corral_app", "corral_token"]);
        assert_eq!(headers[header::COOKIE], "_xsrf=a; x=1");
        let mut only = HeaderMap::new();
        only.insert(header::COOKIE, "corral_app=p".parse().unwrap());
        drop(&mut only, &["corral_app"]);
        assert!(!only.contains_key(header::COOKIE));
    }

    #[test]
    fn a_cookie_is_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            "a=1; corral_ui=corral_abc; b=2".parse().unwrap(),
        );
        assert_eq!(value(&headers, "corral_ui").as_deref(), Some("corral_abc"));
        assert_eq!(value(&headers, "c"), None);
    }
}
