//! Invariants of the cycle over random groups: no over-allocation, nothing on marked agents,
//! rejected sessions launch nothing, limits hold, every session is accounted for, determinism,
//! and arrays' limits: no more placed than they let hold capacity.

use std::collections::{HashMap, HashSet};

use corral_core::slots::{Quantity, SlotName};
use corral_core::*;
use proptest::prelude::*;

fn slots(cpu: u64, gpu: u64) -> Slots {
    let q = |units: u64| Quantity::from_milli(units * 1000);
    Slots::from_pairs([
        (SlotName::new("cpu").unwrap(), q(cpu)),
        (SlotName::new("gpu").unwrap(), q(gpu)),
    ])
    .unwrap()
}

fn template() -> impl Strategy<Value = (u64, u64, u32, u32)> {
    (1..=16u64, 0..=4u64, 1..=1000u32, 0..=5u32)
}

fn agent() -> impl Strategy<Value = (usize, u64, u64, u8, bool, bool, i64)> {
    (
        0..4usize,
        0..=16u64,
        0..=4u64,
        0..4u8,
        any::<bool>(),
        any::<bool>(),
        0..1000i64,
    )
}

fn session() -> impl Strategy<Value = (u64, u64, u8, i32, u32, bool, u8)> {
    (
        0..=20u64,
        0..=5u64,
        0..3u8,
        0..3i32,
        0..3u32,
        prop::bool::weighted(0.1),
        // Of no array, of array `x` or of array `y`.
        prop_oneof![3 => Just(0u8), 1 => 1..3u8],
    )
}

prop_compose! {
    fn snapshots()(
        templates in prop::collection::vec(template(), 1..4),
        agents in prop::collection::vec(agent(), 0..8),
        sessions in prop::collection::vec(session(), 0..24),
        in_flight in prop::collection::vec((0..4usize, 1..3u32), 0..2),
        demand in any::<bool>(),
        (min, extra) in (0..3u32, 0..8u32),
        (headroom_cpu, headroom_gpu) in (0..8u64, 0..2u64),
        cooling in any::<bool>(),
        (sequencer, placement, strict, skip_after) in (0..4u8, any::<bool>(), any::<bool>(), 0..3u32),
        // Per array: its limit, and how many of its sessions hold capacity elsewhere.
        arrays in [(prop::option::of(1..4u32), 0..4u32), (prop::option::of(1..4u32), 0..4u32)],
    ) -> Snapshot {
        let templates: Vec<InstanceTemplate> = templates.iter().enumerate().map(|(i, &(cpu, gpu, cents, max))| InstanceTemplate {
            name: format!("t{i}"), slots: slots(cpu, gpu), price_per_hour: f64::from(cents) / 100.0, max, labels: Default::default(),
            devices: Vec::new(),
        }).collect();
        let agents: Vec<Agent> = agents.iter().enumerate().map(|(i, &(t, used_cpu, used_gpu, state, external, by_hand, idle))| {
            let t = &templates[t % templates.len()];
            let cap = (t.slots.get("cpu").milli() / 1000, t.slots.get("gpu").milli() / 1000);
            let allocated = slots(used_cpu.min(cap.0), used_gpu.min(cap.1));
            Agent {
                id: AgentId(format!("a{i}")), group: "g".into(), template: Some(t.name.clone()), capacity: t.slots.clone(),
                idle_since: allocated.is_empty().then_some(Timestamp(idle)), allocated,
                state: [AgentState::Alive, AgentState::Marked, AgentState::Lost, AgentState::Terminated][state as usize],
                labels: Default::default(), external, drained_by_hand: by_hand, version: None, platform: None, updating: None,
                devices: Vec::new(),
            }
        }).collect();
        let names = ["x", "y"];
        let array_holding = (names.iter().zip(&arrays))
            .filter(|(_, (max, _))| max.is_some())
            .map(|(name, &(_, held))| (name.to_string(), held))
            .collect();
        let sessions = sessions.iter().enumerate().map(|(i, &(cpu, gpu, owner, priority, blocked, running, array))| Session {
            id: SessionId(format!("s{i:02}")), group: "g".into(), owner: format!("u{owner}"), priority,
            request: slots(cpu, gpu), image: None, kind: SessionType::Batch, submitted_at: Timestamp(i as i64),
            state: if running { SessionState::Running } else { SessionState::Pending }, agent: None, blocked_passes: blocked,
            constraints: Vec::new(),
            devices: Vec::new(),
            array: (array > 0).then(|| ArrayMember {
                id: names[array as usize - 1].into(),
                max_running: arrays[array as usize - 1].0,
            }),
        }).collect();
        let in_flight = in_flight.iter().map(|&(t, count)| InFlight { template: templates[t % templates.len()].name.clone(), count, since: Timestamp(0) }).collect();
        Snapshot {
            now: Timestamp(700_000),
            group: ScalingGroup {
                name: "g".into(),
                policy: ScalingPolicy {
                    kind: if demand { PolicyKind::Demand } else { PolicyKind::Fixed },
                    min_nodes: min, max_nodes: min + extra, headroom: slots(headroom_cpu, headroom_gpu),
                    idle_wait_secs: 300, cooldown_secs: 60, batch_idle_ms: 0, batch_max_ms: 0, max_launches_per_pass: 100, on_agent_lost: OnAgentLost::Requeue, on_disconnect: Default::default(), termination: Termination::default(), external: ExternalAgents::default(), agent_update: Default::default(), image_update: Default::default(), expected_nodes: Default::default(),
                },
                scheduler: SchedulerConfig {
                    sequencer: [Sequencer::Fifo, Sequencer::Lifo, Sequencer::Priority, Sequencer::Drf][sequencer as usize],
                    placement: if placement { PlacementStrategy::Binpack } else { PlacementStrategy::Spread },
                    head_of_line: if strict { HeadOfLine::Strict } else { HeadOfLine::Backfill },
                    skip_after,
                },
                templates,
            },
            agents, sessions, images: vec![], in_flight,
            last_scale_out: cooling.then_some(Timestamp(690_000)),
            launch_limits: Default::default(),
            array_holding,
            removed: Default::default(),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn no_agent_is_ever_over_allocated(s in snapshots()) {
        let d = cycle(&s);
        let mut load: HashMap<&str, Slots> = s.agents.iter().map(|a| (a.id.0.as_str(), a.allocated.clone())).collect();
        for p in &d.placements {
            let l = load.get_mut(p.agent.0.as_str()).expect("placed on a known agent");
            *l = l.checked_add(&p.slots).unwrap();
        }
        for a in &s.agents {
            prop_assert!(load[a.id.0.as_str()].fits_in(&a.capacity), "agent {} over-allocated", a.id);
        }
    }

    #[test]
    fn marked_lost_and_terminated_agents_receive_nothing(s in snapshots()) {
        let d = cycle(&s);
        let marked_now: HashSet<&str> = d.marks.iter().map(|m| m.agent.0.as_str()).collect();
        let unmarked_now: HashSet<&str> = d.unmarks.iter().map(|m| m.agent.0.as_str()).collect();
        for p in &d.placements {
            let a = s.agents.iter().find(|a| a.id == p.agent).unwrap();
            let takes = (a.state == AgentState::Alive && !marked_now.contains(a.id.0.as_str())) || unmarked_now.contains(a.id.0.as_str());
            prop_assert!(takes, "session {} placed on {} ({:?})", p.session, a.id, a.state);
        }
    }

    #[test]
    fn rejected_sessions_never_cause_a_launch(s in snapshots()) {
        let d = cycle(&s);
        let rejected: HashSet<&SessionId> = d.rejections.iter().map(|r| &r.session).collect();
        let mut without = s.clone();
        without.sessions.retain(|x| !rejected.contains(&x.id));
        let counts = |d: &Decisions| d.launches.iter().map(|l| (l.template.clone(), l.count)).collect::<Vec<_>>();
        prop_assert_eq!(counts(&d), counts(&cycle(&without)));
    }

    #[test]
    fn launches_never_exceed_the_maximums(s in snapshots()) {
        let d = cycle(&s);
        let alive = |t: Option<&str>| s.agents.iter().filter(|a| a.state != AgentState::Terminated && (t.is_none() || a.template.as_deref() == t)).count() as u32;
        let flying = |t: Option<&str>| s.in_flight.iter().filter(|f| t.is_none() || Some(f.template.as_str()) == t).map(|f| f.count).sum::<u32>();
        let launched = |t: Option<&str>| d.launches.iter().filter(|l| t.is_none() || Some(l.template.as_str()) == t).map(|l| l.count).sum::<u32>();
        // External agents do not count toward max_nodes.
        let nodes = s.agents.iter().filter(|a| a.state != AgentState::Terminated && !a.external).count() as u32;
        if launched(None) > 0 {
            prop_assert!(nodes + flying(None) + launched(None) <= s.group.policy.max_nodes);
            prop_assert!(launched(None) <= s.group.policy.max_launches_per_pass);
        }
        for t in &s.group.templates {
            let name = Some(t.name.as_str());
            if launched(name) > 0 {
                prop_assert!(alive(name) + flying(name) + launched(name) <= t.max, "template {} over its max", t.name);
            }
        }
        if s.group.policy.kind == PolicyKind::Fixed {
            prop_assert!(d.launches.is_empty() && d.marks.is_empty() && d.unmarks.is_empty() && d.terminations.is_empty());
        }
    }

    #[test]
    fn every_pending_session_is_placed_rejected_or_waiting_once(s in snapshots()) {
        let d = cycle(&s);
        let mut seen: Vec<&SessionId> = d.placements.iter().map(|p| &p.session)
            .chain(d.rejections.iter().map(|r| &r.session))
            .chain(d.waiting.iter().map(|w| &w.session))
            .collect();
        seen.sort();
        let mut pending: Vec<&SessionId> = s.pending().map(|x| &x.id).collect();
        pending.sort();
        prop_assert_eq!(seen, pending);
    }

    #[test]
    fn scale_in_only_marks_idle_agents_and_terminates_empty_marked_ones(s in snapshots()) {
        let d = cycle(&s);
        for m in &d.marks {
            let a = s.agents.iter().find(|a| a.id == m.agent).unwrap();
            prop_assert!(a.state == AgentState::Alive && a.is_idle() && !a.external);
            prop_assert!(!d.placements.iter().any(|p| p.agent == m.agent));
        }
        for t in &d.terminations {
            let a = s.agents.iter().find(|a| a.id == t.agent).unwrap();
            prop_assert!(a.state == AgentState::Marked && a.is_idle() && !a.external);
            prop_assert!(!d.unmarks.iter().any(|u| u.agent == t.agent));
        }
    }

    #[test]
    fn no_array_is_given_more_than_its_limit(s in snapshots()) {
        let d = cycle(&s);
        let mut placed: HashMap<&str, u32> = HashMap::new();
        for p in &d.placements {
            let x = s.sessions.iter().find(|x| x.id == p.session).unwrap();
            if let Some(ArrayMember { id, max_running: Some(_) }) = &x.array {
                *placed.entry(id).or_default() += 1;
            }
        }
        for (id, n) in placed {
            let max = s.sessions.iter().find_map(|x| x.array.as_ref().filter(|a| a.id == id)?.max_running).unwrap();
            let held = s.array_holding.get(id).copied().unwrap_or(0);
            prop_assert!(n + held <= max.max(held), "array {} given {} beside {} with limit %{}", id, n, held, max);
        }
    }

    #[test]
    fn the_same_snapshot_gives_the_same_decisions(s in snapshots()) {
        prop_assert_eq!(cycle(&s), cycle(&s.clone()));
    }

    #[test]
    fn a_carried_pass_decides_as_a_fresh_one(first in snapshots(), second in snapshots()) {
        let mut carry = Carry::default();
        cycle_carrying(&first, &mut carry);
        // The caller's part: each agent whose capacity, allocation or devices differ.
        for a in &second.agents {
            let changed = first.agents.iter().any(|b| {
                b.id == a.id
                    && (b.capacity != a.capacity || b.allocated != a.allocated || b.devices != a.devices)
            });
            if changed {
                carry.changed(&a.id);
            }
        }
        // And each session that holds capacity in one snapshot and not, or not the same, in
        // the other: ended, or placed.
        let holding = |s: &Snapshot| -> Vec<(String, String, Slots)> {
            (s.sessions.iter())
                .filter(|x| x.state.holds_capacity())
                .map(|x| (x.id.0.clone(), x.owner.clone(), s.required_shares_of(x).into_owned()))
                .collect()
        };
        let (before, after) = (holding(&first), holding(&second));
        for x in before.iter().filter(|x| !after.contains(x)) {
            carry.ended(&x.1, &x.2);
        }
        for x in after.iter().filter(|x| !before.contains(x)) {
            carry.placed(&x.1, &x.2);
        }
        prop_assert_eq!(cycle_carrying(&second, &mut carry), cycle(&second));
    }
}
