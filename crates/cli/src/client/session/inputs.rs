//! Local input files of sessions and batch jobs: their names in the session's directory,
//! checked before anything is submitted, and their upload once it is.

use anyhow::{bail, Context, Result};
use corral_api::sessions::SessionView;
use corral_core::arrays::substitute_index;
use corral_core::ArrayRange;

use super::super::http::{parse, Api};

/// The names local input files have in the session's directory: their file names, distinct.
pub(crate) fn input_names(inputs: &[String]) -> Result<Vec<String>> {
    let mut names = Vec::new();
    for input in inputs {
        if !std::path::Path::new(input).is_file() {
            bail!("--input {input:?}: not a readable file");
        }
        let name = input_name(input);
        if names.contains(&name) {
            bail!("--input {input:?}: another input is also named {name:?}");
        }
        names.push(name);
    }
    Ok(names)
}

/// The input names of an array's sessions (`{index}` left in), once every index's local
/// file is found: nothing is submitted when one is missing.
pub(super) fn array_input_names(inputs: &[String], range: &ArrayRange) -> Result<Vec<String>> {
    for index in range.indices() {
        for input in inputs {
            let path = substitute_index(input, index);
            if !std::path::Path::new(&path).is_file() {
                bail!("--input {input:?}: {path:?} (index {index}) is not a readable file");
            }
        }
    }
    let mut names = Vec::new();
    for input in inputs {
        let name = input_name(input);
        if names.contains(&name) {
            bail!("--input {input:?}: another input is also named {name:?}");
        }
        names.push(name);
    }
    Ok(names)
}

/// Uploads each session's own local input files (`{index}` replaced by its index) once an
/// array is submitted, page by page of its sessions.
pub(super) async fn upload_array_inputs(api: &Api, array: &str, inputs: &[String]) -> Result<()> {
    if inputs.is_empty() {
        return Ok(());
    }
    const PAGE: usize = 1000;
    let mut after = None;
    loop {
        let query = [
            ("array", Some(array.to_string())),
            ("limit", Some(PAGE.to_string())),
            ("after", after.clone()),
        ];
        let page: Vec<SessionView> = parse(&api.get(&["sessions"], &query).await?)?;
        for view in &page {
            let id = &view.session.id.0;
            let index = view
                .array_index
                .with_context(|| format!("session {id} of array {array} has no index"))?;
            for input in inputs {
                let path = substitute_index(input, index);
                let data = std::fs::read(&path).with_context(|| format!("reading {path}"))?;
                let name = substitute_index(&input_name(input), index);
                api.put_bytes(&["sessions", id, "inputs", &name], data)
                    .await?;
            }
        }
        match page.last() {
            Some(last) if page.len() == PAGE => after = Some(last.session.id.0.clone()),
            _ => return Ok(()),
        }
    }
}

/// The name a local input file has in the session's directory: its file name.
fn input_name(input: &str) -> String {
    std::path::Path::new(input)
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Uploads the local input files of a just-submitted session or batch job (`resource`:
/// `["sessions", ID]`, or the job's path); it starts once all are there.
pub(crate) async fn upload_inputs(api: &Api, resource: &[&str], inputs: &[String]) -> Result<()> {
    for (input, name) in inputs.iter().zip(input_names(inputs)?) {
        let data = std::fs::read(input).with_context(|| format!("reading {input}"))?;
        api.put_bytes(&[resource, &["inputs", &name]].concat(), data)
            .await?;
    }
    Ok(())
}
