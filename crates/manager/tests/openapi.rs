//! The OpenAPI document is generated from the handlers and the API's types
//! (`corral_manager::api::openapi`); `crates/manager/openapi.json` is its checked-in copy, for
//! readers and tools without a running manager. This test fails while the copy is stale;
//!
//!     CORRAL_UPDATE_OPENAPI=1 cargo test -p corral-manager --test openapi
//!
//! rewrites it.

use corral_manager::api::openapi::DOCUMENT;

const CHECKED_IN: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/openapi.json");

#[test]
fn the_checked_in_document_is_the_generated_one() {
    if std::env::var_os("CORRAL_UPDATE_OPENAPI").is_some() {
        std::fs::write(CHECKED_IN, DOCUMENT.as_str()).expect("writes openapi.json");
        return;
    }
    let checked_in = std::fs::read_to_string(CHECKED_IN).expect("reads openapi.json");
    assert!(
        checked_in == *DOCUMENT,
        "crates/manager/openapi.json is not the generated document; regenerate it with \
         CORRAL_UPDATE_OPENAPI=1 cargo test -p corral-manager --test openapi"
    );
}

fn document() -> serde_json::Value {
    serde_json::from_str(&DOCUMENT).expect("the document is JSON")
}

/// The components a schema refers to, and theirs.
fn refs(value: &serde_json::Value, doc: &serde_json::Value, found: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(o) => {
            if let Some(name) = o
                .get("$ref")
                .and_then(|r| r.as_str())
                .and_then(|r| r.strip_prefix("#/components/schemas/"))
            {
                if !found.iter().any(|f| f == name) {
                    found.push(name.to_string());
                    refs(&doc["components"]["schemas"][name], doc, found);
                }
            }
            o.values().for_each(|v| refs(v, doc, found));
        }
        serde_json::Value::Array(items) => items.iter().for_each(|v| refs(v, doc, found)),
        _ => {}
    }
}

/// Answers are described as the server writes them: slots in their canonical form, never in
/// the forms requests may use; a provider's options as stored, since every secret key shows as
/// "********" (even one sent as null, which the per-provider request schema would refuse).
#[test]
fn answers_are_described_as_written() {
    let doc = document();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            for (status, answer) in op["responses"].as_object().unwrap() {
                if !status.starts_with('2') {
                    continue;
                }
                let mut found = Vec::new();
                refs(&answer["content"], &doc, &mut found);
                for request_form in ["Slots", "RequiredSlots", "SlotsText", "ProviderConfig"] {
                    assert!(
                        !found.iter().any(|f| f == request_form),
                        "{method} {path} {status} answers with {request_form}"
                    );
                }
            }
        }
    }
    let provider = &doc["components"]["schemas"]["ProviderConfigOut"];
    assert_eq!(provider["properties"]["options"]["type"], "object");
    assert!(provider["properties"]["options"].get("$ref").is_none());
}
