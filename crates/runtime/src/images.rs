//! Images on the Docker host: the digest an image came from, and pulls by digest (which move
//! no tag, so agents sharing one daemon each keep the digest they chose).

use bollard::auth::DockerCredentials;
use bollard::query_parameters::CreateImageOptionsBuilder;
use futures_util::StreamExt;

use crate::docker::{docker_error, server_refusal};
use crate::{DockerRuntime, RuntimeError};

/// `image` without its tag or digest: `registry:5000/team/name:tag` is `registry:5000/team/name`.
pub fn repository_of(image: &str) -> &str {
    let name = image.split_once('@').map_or(image, |(name, _)| name);
    let last = name.rfind('/').map_or(0, |i| i + 1);
    match name[last..].rfind(':') {
        Some(colon) => &name[..last + colon],
        None => name,
    }
}

impl DockerRuntime {
    /// The registry digest of the image the host has under `image` (a tag or a digest), as
    /// its repository's entry of `RepoDigests` says; `None` if the host lacks the image or it
    /// came from no registry (built here, never pushed or pulled).
    pub async fn image_digest(&self, image: &str) -> Result<Option<String>, RuntimeError> {
        let inspected = match self.client().inspect_image(image).await {
            Ok(i) => i,
            Err(e) if server_refusal(&e) == Some(404) => return Ok(None),
            Err(e) => return Err(docker_error(format!("inspecting image {image}"), e)),
        };
        let repository = repository_of(image);
        Ok(inspected
            .repo_digests
            .unwrap_or_default()
            .iter()
            .find_map(|d| {
                let (repo, digest) = d.split_once('@')?;
                (repo == repository).then(|| digest.to_string())
            }))
    }

    /// Pulls `repository@digest` (not a tag: no tag moves), signed in as `login` (user name,
    /// password) if given.
    pub async fn pull(
        &self,
        repository: &str,
        digest: &str,
        login: Option<(String, String)>,
    ) -> Result<(), RuntimeError> {
        let reference = format!("{repository}@{digest}");
        let options = CreateImageOptionsBuilder::new()
            .from_image(&reference)
            .build();
        let credentials = login.map(|(username, password)| DockerCredentials {
            username: Some(username),
            password: Some(password),
            ..Default::default()
        });
        let mut progress = self.client().create_image(Some(options), None, credentials);
        while let Some(step) = progress.next().await {
            let step = step.map_err(|e| docker_error(format!("pulling {reference}"), e))?;
            if let Some(error) = step.error_detail.and_then(|d| d.message) {
                return Err(RuntimeError::Pull { reference, error });
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_repository_is_the_name_without_tag_or_digest() {
        assert_eq!(
            repository_of("127.0.0.1:5000/tiny:latest"),
            "127.0.0.1:5000/tiny"
        );
        assert_eq!(repository_of("127.0.0.1:5000/tiny"), "127.0.0.1:5000/tiny");
        assert_eq!(repository_of("busybox"), "busybox");
        assert_eq!(
            repository_of("ghcr.io/team/tiny:v1@sha256:abc"),
            "ghcr.io/team/tiny"
        );
        assert_eq!(repository_of("host:5000/tiny@sha256:abc"), "host:5000/tiny");
    }
}
