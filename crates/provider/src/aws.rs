//! `aws` provider (to be written).

use async_trait::async_trait;
use serde::Deserialize;

use crate::{Context, Instance, LaunchRequest, Provider, ProviderError, TemplateOffer};

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Options {}

pub struct Stub;

pub async fn connect(_options: Options, _context: Context) -> Result<Stub, ProviderError> {
    Err(ProviderError::fatal("the aws provider is not written yet"))
}

#[async_trait]
impl Provider for Stub {
    async fn templates(&self) -> Result<Vec<TemplateOffer>, ProviderError> {
        Ok(Vec::new())
    }
    async fn launch(&self, _t: &str, _r: &[LaunchRequest]) -> Result<Vec<Instance>, ProviderError> {
        Ok(Vec::new())
    }
    async fn terminate(&self, _ids: &[String]) -> Result<(), ProviderError> {
        Ok(())
    }
    async fn list(&self) -> Result<Vec<Instance>, ProviderError> {
        Ok(Vec::new())
    }
}

impl Options {
    /// Checks what serde cannot (values that depend on each other).
    pub fn check(&self) -> Result<(), crate::ConfigError> {
        Ok(())
    }
}
