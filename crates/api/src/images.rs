//! The image catalog: what an image needs at least, wherever it runs.

use serde::{Deserialize, Serialize};

use corral_core::Slots;

/// `PUT /images/{name}` (admin).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
#[serde(deny_unknown_fields)]
pub struct ImageUpdate {
    #[serde(default)]
    pub min_slots: Slots,
}
