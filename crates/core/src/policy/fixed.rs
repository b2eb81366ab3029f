//! The `Fixed` policy: nothing launched, marked or terminated; every unmet session waits.

use super::live::{unavailable, LiveAgents};
use super::{ScaleInput, ScalePlan, ScalingLogic};
use crate::decisions::{NoLaunch, WaitReason};

/// Never launches, marks or terminates: pending sessions wait for running ones to end.
pub struct Fixed;

impl ScalingLogic for Fixed {
    fn plan(&self, input: &ScaleInput) -> ScalePlan {
        let mut live = LiveAgents::new(input);
        ScalePlan {
            waits: (0..input.unmet.len())
                .map(|k| {
                    let because = if live.could_hold(input, k) {
                        NoLaunch::FixedPolicy
                    } else {
                        unavailable(input, k)
                    };
                    Some(WaitReason::NoRoom { because })
                })
                .collect(),
            scale_out_demand: vec![0; input.index.len()].into_boxed_slice(),
            ..ScalePlan::default()
        }
    }
}
