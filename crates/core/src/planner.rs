//! Scale-out planning: packs unmet demand onto instance templates (being written).
