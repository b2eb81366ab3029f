//! Instances in flight as capacity: unmet demand that fits them waits for them.

use super::ScaleInput;
use crate::decisions::WaitReason;
use crate::dense::{Rows, Vector};
use crate::ledger::Ledger;
use crate::model::PlacementStrategy;
use crate::schedule::FreeIndex;

/// Instances on their way: as many bins as demand could use, with what the demand placed on
/// them has left, and the free capacity of the others summed (a count in flight may be huge,
/// and one bin per instance would cost memory in proportion).
pub(super) struct Launching {
    pub(super) bins: FreeIndex,
    /// Per bin: its template.
    pub(super) template: Vec<usize>,
    /// Per template: its instances on their way.
    pub(super) per_template: Vec<u32>,
    /// Free capacity of the instances on their way that have no bin.
    pub(super) unbinned: Vector,
}

impl Launching {
    /// Instances on their way.
    pub(super) fn count(&self) -> u32 {
        self.per_template.iter().sum()
    }
}

/// Places unmet demand on the instances already launching (binpack), setting the waits of what
/// they hold. Returns them and the unmet sessions they do not hold, in queue order.
pub(super) fn wait_for_in_flight(
    input: &ScaleInput,
    template_slots: &[Vector],
    waits: &mut [Option<WaitReason>],
) -> (Launching, Vec<usize>) {
    let s = input.snapshot;
    let templates = &s.group.templates;
    let mut bins = Rows::with_capacity(input.index.len(), 0);
    let mut bin_template: Vec<usize> = Vec::new();
    let mut bin_ledgers: Vec<Ledger> = Vec::new();
    let mut per_template = vec![0u32; templates.len()];
    let mut unbinned = vec![0u64; input.index.len()];
    for f in &s.in_flight {
        if let Some(t) = templates.iter().position(|t| t.name == f.template) {
            let count = f.count.min(s.group.policy.max_nodes);
            per_template[t] = per_template[t].saturating_add(count);
            // Each unmet session takes at most one bin, so more bins of a template than there
            // are sessions would never be used; the rest only add free capacity.
            let binned = count.min(u32::try_from(input.unmet.len()).unwrap_or(u32::MAX));
            for _ in 0..binned {
                bins.push(&template_slots[t]);
                bin_ledgers.push(input.dims.template_ledgers[t].clone());
                bin_template.push(t);
            }
            // Saturating: a sum this large already covers any headroom.
            let extra = u64::from(count - binned);
            for (u, v) in unbinned.iter_mut().zip(&template_slots[t]) {
                *u = u.saturating_add(v.saturating_mul(extra));
            }
        }
    }
    let mut launching = FreeIndex::new(input.index.len(), bins, vec![true; bin_template.len()])
        .with_devices(input.index.shared_devices(), bin_ledgers);
    let mut rest = Vec::with_capacity(input.unmet.len());
    // Bins only shrink: a class that found none is not searched again.
    let mut no_bin = vec![false; input.classes];
    for (k, &(need, class)) in input.unmet.iter().enumerate() {
        let found = if no_bin[class] {
            None
        } else {
            launching.find(need, PlacementStrategy::Binpack)
        };
        match found {
            Some(b) => {
                launching.take(b, need);
                waits[k] = Some(WaitReason::InFlight {
                    template: templates[bin_template[b]].name.clone(),
                });
            }
            None => {
                no_bin[class] = true;
                rest.push(k);
            }
        }
    }
    let launching = Launching {
        bins: launching,
        template: bin_template,
        per_template,
        unbinned: unbinned.into(),
    };
    (launching, rest)
}
