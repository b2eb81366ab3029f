//! `static`: launches nothing; agents join by hand (the on-premise default, with policy `fixed`).

use async_trait::async_trait;
use serde::Deserialize;

use crate::{Instance, LaunchRequest, Provider, ProviderError, TemplateOffer};

/// The static provider takes no options.
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema), schema(as = OptionsStatic))]
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Options {}

pub struct Static;

#[async_trait]
impl Provider for Static {
    async fn templates(&self) -> Result<Vec<TemplateOffer>, ProviderError> {
        Ok(Vec::new())
    }

    async fn launch(
        &self,
        template: &str,
        _requests: &[LaunchRequest],
    ) -> Result<Vec<Instance>, ProviderError> {
        Err(ProviderError::fatal(format!(
            "the static provider cannot launch instances (template {template:?}); \
             add agents by hand or configure a provider for the group"
        )))
    }

    async fn terminate(&self, _ids: &[String]) -> Result<(), ProviderError> {
        Ok(())
    }

    async fn list(&self) -> Result<Vec<Instance>, ProviderError> {
        Ok(Vec::new())
    }
}
