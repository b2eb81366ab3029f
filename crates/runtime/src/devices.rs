//! What a session is given of the host's devices, in the forms the runtimes hand it over: the
//! variables CUDA and the NVIDIA container tools read (both runtimes) and Docker device
//! requests (the Docker runtime).

use std::path::{Path, PathBuf};

use bollard::models::DeviceRequest;
use corral_core::devices::GPU;
use corral_core::DeviceGrant;

/// The GPUs CUDA may use: the granted ids (UUIDs, which CUDA accepts in place of indices).
pub const CUDA_VISIBLE_DEVICES: &str = "CUDA_VISIBLE_DEVICES";
/// The GPUs the NVIDIA container runtime mounts into a container: the same ids.
pub const NVIDIA_VISIBLE_DEVICES: &str = "NVIDIA_VISIBLE_DEVICES";
/// The share of each granted GPU: `GPU-aaa=1,MIG-bbb=0.5`.
pub const GPU_SHARES_VAR: &str = "CORRAL_GPU_SHARES";

/// Where CDI specifications are looked for by default (the CDI defaults, which Docker reads).
pub const DEFAULT_CDI_DIRS: [&str; 2] = ["/etc/cdi", "/var/run/cdi"];

/// The CDI device kind of NVIDIA GPUs (what `nvidia-ctk cdi generate` writes).
const CDI_GPU_KIND: &str = "nvidia.com/gpu";

fn gpus(grants: &[DeviceGrant]) -> impl Iterator<Item = &DeviceGrant> {
    grants.iter().filter(|g| g.kind.as_str() == GPU)
}

/// Whether the grants include a GPU.
pub(crate) fn grants_gpus(grants: &[DeviceGrant]) -> bool {
    gpus(grants).next().is_some()
}

/// The device variables of a session: the ids of its `gpu` grants, comma-separated in grant
/// order, in [`CUDA_VISIBLE_DEVICES`] and [`NVIDIA_VISIBLE_DEVICES`], and their shares in
/// [`GPU_SHARES_VAR`]. All three are always set, empty without a `gpu` grant: an empty list
/// shows CUDA no device and makes the NVIDIA runtime mount none, whatever the image or the
/// agent's environment says. They go after the session's own variables, so that the grant wins.
pub fn device_environment(grants: &[DeviceGrant]) -> [(&'static str, String); 3] {
    let ids: Vec<&str> = gpus(grants).map(|g| g.id.as_str()).collect();
    let shares: Vec<String> = gpus(grants)
        .map(|g| format!("{}={}", g.id, g.share))
        .collect();
    let ids = ids.join(",");
    [
        (CUDA_VISIBLE_DEVICES, ids.clone()),
        (NVIDIA_VISIBLE_DEVICES, ids),
        (GPU_SHARES_VAR, shares.join(",")),
    ]
}

/// The Docker device requests of a session's `gpu` grants: none without one; with a CDI
/// specification of NVIDIA GPUs on the host (`cdi`), one request of the `cdi` driver naming
/// the devices as CDI does (`nvidia.com/gpu=<uuid>`: Docker 25 and later, with CDI enabled);
/// else one request of the `nvidia` driver (the NVIDIA container toolkit) naming their ids.
pub fn device_requests(grants: &[DeviceGrant], cdi: bool) -> Option<Vec<DeviceRequest>> {
    let ids: Vec<&str> = gpus(grants).map(|g| g.id.as_str()).collect();
    if ids.is_empty() {
        return None;
    }
    let request = if cdi {
        DeviceRequest {
            driver: Some("cdi".into()),
            device_ids: Some(
                ids.iter()
                    .map(|id| format!("{CDI_GPU_KIND}={id}"))
                    .collect(),
            ),
            ..Default::default()
        }
    } else {
        DeviceRequest {
            driver: Some("nvidia".into()),
            device_ids: Some(ids.iter().map(|id| id.to_string()).collect()),
            capabilities: Some(vec![vec!["gpu".into()]]),
            ..Default::default()
        }
    };
    Some(vec![request])
}

/// Whether a CDI specification of NVIDIA GPUs is in one of `dirs`: a file there that mentions
/// `nvidia.com/gpu`. Directories that do not exist and files that cannot be read are skipped.
pub fn nvidia_cdi_spec_present(dirs: &[PathBuf]) -> bool {
    dirs.iter().any(|dir| {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return false;
        };
        entries
            .filter_map(Result::ok)
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .any(|e| mentions_nvidia_gpus(&e.path()))
    })
}

fn mentions_nvidia_gpus(file: &Path) -> bool {
    match std::fs::read(file) {
        Ok(bytes) => bytes
            .windows(CDI_GPU_KIND.len())
            .any(|w| w == CDI_GPU_KIND.as_bytes()),
        Err(e) => {
            tracing::debug!(file = %file.display(), error = %e, "CDI specification not read");
            false
        }
    }
}

/// Checks a session's grants: ids 1 to 128 characters without space, comma, `=` or control
/// character (they are joined with commas and paired with `=` in its variables), each once,
/// shares above 0 and at most one device. The error names the grant.
pub(crate) fn check_grants(grants: &[DeviceGrant]) -> Result<(), String> {
    for (i, g) in grants.iter().enumerate() {
        let bad_id = g.id.is_empty()
            || g.id.len() > 128
            || g.id
                .chars()
                .any(|c| c.is_whitespace() || c.is_control() || c == ',' || c == '=');
        if bad_id {
            return Err(format!(
                "device grant {:?}: an id is 1 to 128 characters, no space, comma, = or control character",
                g.id
            ));
        }
        if g.share.is_zero() || g.share.milli() > 1000 {
            return Err(format!(
                "device grant {:?}: share {} is not above 0 and at most 1",
                g.id, g.share
            ));
        }
        if grants[..i].iter().any(|other| other.id == g.id) {
            return Err(format!("device {:?} is granted twice", g.id));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use corral_core::{Quantity, SlotName};

    fn grant(id: &str, kind: &str, share_milli: u64) -> DeviceGrant {
        DeviceGrant {
            id: id.into(),
            kind: SlotName::new(kind).unwrap(),
            share: Quantity::from_milli(share_milli),
            memory: Quantity::ZERO,
        }
    }

    #[test]
    fn gpu_grants_become_variables_in_grant_order() {
        let grants = [
            grant("GPU-bbb", "gpu", 1000),
            grant("fpga0", "fpga", 1000),
            grant("MIG-aaa", "gpu", 500),
        ];
        assert_eq!(
            device_environment(&grants),
            [
                (CUDA_VISIBLE_DEVICES, "GPU-bbb,MIG-aaa".to_string()),
                (NVIDIA_VISIBLE_DEVICES, "GPU-bbb,MIG-aaa".to_string()),
                (GPU_SHARES_VAR, "GPU-bbb=1,MIG-aaa=0.5".to_string()),
            ]
        );
    }

    #[test]
    fn no_gpu_grant_sets_the_variables_empty() {
        for grants in [vec![], vec![grant("fpga0", "fpga", 1000)]] {
            assert_eq!(
                device_environment(&grants),
                [
                    (CUDA_VISIBLE_DEVICES, String::new()),
                    (NVIDIA_VISIBLE_DEVICES, String::new()),
                    (GPU_SHARES_VAR, String::new()),
                ]
            );
        }
    }

    #[test]
    fn gpu_grants_become_one_device_request() {
        let grants = [grant("GPU-aaa", "gpu", 1000), grant("MIG-bbb", "gpu", 250)];
        assert_eq!(
            device_requests(&grants, false),
            Some(vec![DeviceRequest {
                driver: Some("nvidia".into()),
                count: None,
                device_ids: Some(vec!["GPU-aaa".into(), "MIG-bbb".into()]),
                capabilities: Some(vec![vec!["gpu".into()]]),
                options: None,
            }])
        );
        assert_eq!(
            device_requests(&grants, true),
            Some(vec![DeviceRequest {
                driver: Some("cdi".into()),
                count: None,
                device_ids: Some(vec![
                    "nvidia.com/gpu=GPU-aaa".into(),
                    "nvidia.com/gpu=MIG-bbb".into()
                ]),
                capabilities: None,
                options: None,
            }])
        );
        assert_eq!(device_requests(&[], false), None);
        assert_eq!(device_requests(&[grant("fpga0", "fpga", 1000)], true), None);
    }

    #[test]
    fn a_cdi_spec_is_found_by_its_kind() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let dirs = vec![
            a.path().join("missing"),
            a.path().to_path_buf(),
            b.path().to_path_buf(),
        ];
        assert!(!nvidia_cdi_spec_present(&dirs));
        std::fs::write(a.path().join("other.yaml"), "kind: vendor.com/fpga\n").unwrap();
        std::fs::create_dir(a.path().join("nvidia.com")).unwrap();
        assert!(!nvidia_cdi_spec_present(&dirs));
        std::fs::write(
            b.path().join("nvidia.yaml"),
            "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices: []\n",
        )
        .unwrap();
        assert!(nvidia_cdi_spec_present(&dirs));
        assert!(!nvidia_cdi_spec_present(&dirs[..2]));
    }

    #[test]
    fn grants_are_checked() {
        assert_eq!(
            check_grants(&[grant("GPU-a", "gpu", 1000), grant("MIG-b", "gpu", 1)]),
            Ok(())
        );
        for (grants, what) in [
            (vec![grant("", "gpu", 1000)], "\"\""),
            (vec![grant("GPU-a,GPU-b", "gpu", 1000)], "GPU-a,GPU-b"),
            (vec![grant("GPU-a=1", "gpu", 1000)], "GPU-a=1"),
            (vec![grant("GPU a", "gpu", 1000)], "GPU a"),
            (vec![grant("GPU-a", "gpu", 0)], "share 0"),
            (vec![grant("GPU-a", "gpu", 1500)], "share 1.5"),
            (
                vec![grant("GPU-a", "gpu", 500), grant("GPU-a", "gpu", 500)],
                "granted twice",
            ),
        ] {
            let err = check_grants(&grants).unwrap_err();
            assert!(err.contains(what), "{grants:?}: {err}");
        }
    }
}
