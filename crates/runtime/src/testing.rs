//! Support for tests of this crate and its users: a tiny image built locally from Debian's
//! static busybox (this machine cannot pull images), and a session's container created without
//! being started.

use std::path::Path;
use std::time::Duration;

use bollard::query_parameters::BuildImageOptionsBuilder;
use futures_util::StreamExt;

use crate::{DockerRuntime, SessionSpec};

/// The test image: busybox with its applets on PATH.
pub const TEST_IMAGE: &str = "corral-test-busybox:1";
/// Where Debian's busybox-static installs its binary.
const BUSYBOX: &str = "/bin/busybox";
const DOCKERFILE: &str = r#"FROM scratch
COPY busybox /bin/busybox
RUN ["/bin/busybox", "--install", "-s", "/bin"]
ENV PATH=/bin
CMD ["echo", "default command"]
"#;

/// A runtime on the local daemon with [`TEST_IMAGE`] present, or why it cannot be had (no
/// daemon, no busybox), for the caller to print as the reason it skips.
pub async fn docker_with_test_image(agent: &str) -> Result<DockerRuntime, String> {
    let rt =
        match tokio::time::timeout(Duration::from_secs(10), DockerRuntime::connect(agent)).await {
            Ok(Ok(rt)) => rt,
            Ok(Err(e)) => return Err(format!("no Docker daemon answers: {e}")),
            Err(_) => return Err("the Docker daemon did not answer in 10 s".into()),
        };
    // Tests run in parallel: one builds, the others wait for it.
    static BUILD: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _building = BUILD.lock().await;
    if rt.client().inspect_image(TEST_IMAGE).await.is_ok() {
        return Ok(rt);
    }
    let busybox = std::fs::read(BUSYBOX)
        .map_err(|_| format!("{BUSYBOX} is missing (apt-get install busybox-static)"))?;
    let mut context = tar::Builder::new(Vec::new());
    for (name, bytes, mode) in [
        ("Dockerfile", DOCKERFILE.as_bytes(), 0o644),
        ("busybox", &busybox[..], 0o755),
    ] {
        let mut header = tar::Header::new_gnu();
        header.set_size(bytes.len() as u64);
        header.set_mode(mode);
        header.set_cksum();
        context
            .append_data(&mut header, name, bytes)
            .map_err(|e| e.to_string())?;
    }
    let context = context.into_inner().map_err(|e| e.to_string())?;
    let options = BuildImageOptionsBuilder::new()
        .t(TEST_IMAGE)
        .rm(true)
        .build();
    let mut build =
        rt.client()
            .build_image(options, None, Some(bollard::body_full(context.into())));
    while let Some(step) = build.next().await {
        match step {
            Ok(info) => {
                if let Some(detail) = info.error_detail {
                    return Err(format!("building {TEST_IMAGE}: {detail:?}"));
                }
            }
            Err(e) => return Err(format!("building {TEST_IMAGE}: {e}")),
        }
    }
    drop(build);
    Ok(rt)
}

/// Creates a session's container as [`DockerRuntime::start`] would, without starting it, and
/// returns its name: for tests that look at what the daemon was asked, such as GPUs, which a
/// daemon without the NVIDIA runtime refuses only at the start. The daemon's refusal to create
/// it is the error's text.
pub async fn create_session_container(
    rt: &DockerRuntime,
    spec: &SessionSpec,
    work_root: &Path,
) -> Result<String, String> {
    match rt.create(spec, work_root).await {
        Ok(Ok(name)) => Ok(name),
        Ok(Err(why)) => Err(why),
        Err(e) => Err(e.to_string()),
    }
}
