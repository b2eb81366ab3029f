//! The store as its users see it, on SQLite and (with CORRAL_TEST_DATABASE_URL) PostgreSQL.

mod common;

use corral_core::slots::{Quantity, SlotName};
use corral_core::*;
use corral_store::{
    Backend, BatchJobRecord, EventFilter, InstancePhase, NewEvent, Role, SessionFilter, Store,
    StoreError,
};

use common::*;

/// A group with its agents and sessions stored, for the tests that need a populated store.
async fn populate(store: &Store, g: &str, agents: &[Agent], sessions: &[Session]) {
    store.create_group(&group(g), t(1)).await.unwrap();
    for a in agents {
        store.upsert_agent(a, t(1)).await.unwrap();
    }
    for s in sessions {
        store.insert_session(s, &spec(), t(2)).await.unwrap();
    }
}

async fn session_state(store: &Store, id: &str) -> SessionState {
    store.get_session(id).await.unwrap().unwrap().session.state
}

async fn allocated(store: &Store, id: &str) -> String {
    store
        .get_agent(id)
        .await
        .unwrap()
        .unwrap()
        .allocated
        .to_string()
}

fn place(session: &str, agent: &str, request: &str) -> Placement {
    Placement {
        session: SessionId(session.into()),
        agent: AgentId(agent.into()),
        slots: slots(request),
        devices: Vec::new(),
    }
}

fn agent_decision(agent: &str, reason: &str) -> AgentDecision {
    AgentDecision {
        agent: AgentId(agent.into()),
        reason: reason.into(),
    }
}

on_both!(migrations_on_empty_and_existing_db, |db| {
    // A fresh database has the schema and nothing in it.
    assert!(db.store.list_groups().await.unwrap().is_empty());
    assert_eq!(db.store.count_tokens().await.unwrap(), 0);
    db.store.create_group(&group("g"), t(1)).await.unwrap();
    // Opening an existing database runs no migration twice and keeps its rows.
    db.reopen().await;
    db.reopen().await;
    let names: Vec<String> = db
        .store
        .list_groups()
        .await
        .unwrap()
        .into_iter()
        .map(|g| g.name)
        .collect();
    assert_eq!(names, ["g"]);
});

on_both!(group_crud, |db| {
    let s = &db.store;
    let mut g = group("gpu");
    s.create_group(&g, t(1)).await.unwrap();
    assert_eq!(s.get_group("gpu").await.unwrap(), Some(g.clone()));
    assert!(matches!(
        s.create_group(&g, t(2)).await,
        Err(StoreError::Conflict { what: "group", .. })
    ));
    assert_eq!(s.get_group("nope").await.unwrap(), None);

    g.policy.max_nodes = 3;
    g.scheduler.sequencer = Sequencer::Priority;
    g.templates.clear();
    s.update_group(&g, t(3)).await.unwrap();
    assert_eq!(s.get_group("gpu").await.unwrap(), Some(g.clone()));
    s.create_group(&group("cpu"), t(4)).await.unwrap();
    let names: Vec<String> = s
        .list_groups()
        .await
        .unwrap()
        .into_iter()
        .map(|g| g.name)
        .collect();
    assert_eq!(names, ["cpu", "gpu"]);
    assert!(matches!(
        s.update_group(&group("nope"), t(5)).await,
        Err(StoreError::NotFound { what: "group", .. })
    ));
    assert!(matches!(
        s.delete_group("nope").await,
        Err(StoreError::NotFound { what: "group", .. })
    ));

    // In use: a live agent, then a pending session, keep it.
    s.upsert_agent(&agent("a1", "gpu", "cpu=4"), t(6))
        .await
        .unwrap();
    s.insert_session(&session("s1", "gpu", "ann", "cpu=1", 7), &spec(), t(7))
        .await
        .unwrap();
    let err = s.delete_group("gpu").await.unwrap_err();
    assert!(
        matches!(&err, StoreError::Refused(m) if m.contains("1 agent(s)") && m.contains("1 session(s)")),
        "{err}"
    );
    s.set_agent_state("a1", AgentState::Terminated, false, t(8))
        .await
        .unwrap();
    assert!(matches!(
        s.delete_group("gpu").await,
        Err(StoreError::Refused(_))
    ));
    s.cancel_session("s1", t(9), "by ann").await.unwrap();
    s.delete_group("gpu").await.unwrap();
    assert_eq!(s.get_group("gpu").await.unwrap(), None);
    // Its ended sessions stay as history.
    assert_eq!(session_state(s, "s1").await, SessionState::Cancelled);
});

on_both!(images_crud, |db| {
    let s = &db.store;
    let image = Image {
        name: "cuda".into(),
        min_slots: slots("gpu=1,mem=4GiB"),
    };
    s.put_image(&image).await.unwrap();
    assert_eq!(s.get_image("cuda").await.unwrap(), Some(image.clone()));
    let bigger = Image {
        name: "cuda".into(),
        min_slots: slots("gpu=2"),
    };
    s.put_image(&bigger).await.unwrap();
    s.put_image(&Image {
        name: "alpine".into(),
        min_slots: Slots::new(),
    })
    .await
    .unwrap();
    let images = s.list_images().await.unwrap();
    assert_eq!(images.len(), 2);
    assert_eq!(images[0].name, "alpine");
    assert_eq!(images[1], bigger);
    s.delete_image("cuda").await.unwrap();
    assert_eq!(s.get_image("cuda").await.unwrap(), None);
    assert!(matches!(
        s.delete_image("cuda").await,
        Err(StoreError::NotFound { what: "image", .. })
    ));
});

on_both!(sessions_insert_get_list_and_page, |db| {
    let s = &db.store;
    s.create_group(&group("g"), t(1)).await.unwrap();
    s.create_group(&group("h"), t(1)).await.unwrap();
    let mut with_image = session("s1", "g", "ann", "cpu=1,gpu=0.5", 10);
    with_image.image = Some("cuda".into());
    with_image.priority = -3;
    with_image.kind = SessionType::Interactive;
    s.insert_session(&with_image, &spec(), t(11)).await.unwrap();
    // Submitted out of order: lists go by submission time, then id.
    for (id, group, owner, at) in [
        ("s4", "g", "bob", 40),
        ("s3", "h", "ann", 30),
        ("s2b", "g", "bob", 20),
        ("s2a", "g", "ann", 20),
    ] {
        s.insert_session(&session(id, group, owner, "cpu=1", at), &spec(), t(at + 1))
            .await
            .unwrap();
    }

    let got = s.get_session("s1").await.unwrap().unwrap();
    assert_eq!(got.session, with_image);
    assert_eq!(got.spec, spec());
    assert_eq!(got.updated_at, t(11));
    assert_eq!(got.wait_reason, None);
    assert_eq!(got.history.len(), 1);
    assert_eq!(got.history[0].state, SessionState::Pending);
    assert_eq!(got.history[0].reason, "submitted");
    assert_eq!(s.get_session("nope").await.unwrap(), None);

    assert!(matches!(
        s.insert_session(&with_image, &spec(), t(12)).await,
        Err(StoreError::Conflict {
            what: "session",
            ..
        })
    ));
    // A retry of an insert that had in fact landed is acknowledged; another session under a
    // taken id is not.
    s.insert_session_again(&with_image, &spec(), t(12))
        .await
        .unwrap();
    assert_eq!(s.get_session("s1").await.unwrap().unwrap().history.len(), 1);
    let mut impostor = with_image.clone();
    impostor.owner = "eve".into();
    assert!(matches!(
        s.insert_session_again(&impostor, &spec(), t(12)).await,
        Err(StoreError::Conflict {
            what: "session",
            ..
        })
    ));
    assert!(matches!(
        s.insert_session_again(
            &with_image,
            &serde_json::json!({"command": ["other"]}),
            t(12)
        )
        .await,
        Err(StoreError::Conflict { .. })
    ));
    assert!(matches!(
        s.insert_session(&session("x", "nope", "ann", "cpu=1", 1), &spec(), t(12))
            .await,
        Err(StoreError::NotFound { what: "group", .. })
    ));

    let all = s.list_sessions(&SessionFilter::default()).await.unwrap();
    assert_eq!(ids(&all), ["s1", "s2a", "s2b", "s3", "s4"]);
    assert!(all.iter().all(|r| r.history.is_empty()));
    let in_g = SessionFilter {
        group: Some("g".into()),
        ..Default::default()
    };
    assert_eq!(
        ids(&s.list_sessions(&in_g).await.unwrap()),
        ["s1", "s2a", "s2b", "s4"]
    );
    let anns = SessionFilter {
        owner: Some("ann".into()),
        ..Default::default()
    };
    assert_eq!(
        ids(&s.list_sessions(&anns).await.unwrap()),
        ["s1", "s2a", "s3"]
    );

    // Pages of two, continuing after the last id of each page.
    let mut pages = Vec::new();
    let mut after = None;
    loop {
        let page = s
            .list_sessions(&SessionFilter {
                limit: Some(2),
                after_id: after.clone(),
                ..Default::default()
            })
            .await
            .unwrap();
        if page.is_empty() {
            break;
        }
        after = page.last().map(|r| r.session.id.0.clone());
        pages.push(ids(&page));
    }
    assert_eq!(pages, [vec!["s1", "s2a"], vec!["s2b", "s3"], vec!["s4"]]);
    assert!(matches!(
        s.list_sessions(&SessionFilter {
            after_id: Some("nope".into()),
            ..Default::default()
        })
        .await,
        Err(StoreError::NotFound {
            what: "session",
            ..
        })
    ));

    s.cancel_session("s2a", t(50), "no longer needed")
        .await
        .unwrap();
    let cancelled = SessionFilter {
        state: Some(SessionState::Cancelled),
        ..Default::default()
    };
    assert_eq!(ids(&s.list_sessions(&cancelled).await.unwrap()), ["s2a"]);
    let pending_bob = SessionFilter {
        owner: Some("bob".into()),
        state: Some(SessionState::Pending),
        group: Some("g".into()),
        ..Default::default()
    };
    assert_eq!(
        ids(&s.list_sessions(&pending_bob).await.unwrap()),
        ["s2b", "s4"]
    );
});

on_both!(cancel_frees_the_agents_allocation, |db| {
    let s = &db.store;
    populate(
        s,
        "g",
        &[agent("a1", "g", "cpu=4,mem=8GiB")],
        &[
            session("s1", "g", "ann", "cpu=2,mem=1GiB", 10),
            session("s2", "g", "ann", "cpu=1", 11),
        ],
    )
    .await;
    // The cycle places both; the agent holds their sum.
    let snap = s.snapshot("g", t(20)).await.unwrap();
    let decisions = cycle(&snap);
    assert_eq!(decisions.placements.len(), 2);
    s.apply("g", &snap, &decisions, t(20)).await.unwrap();
    assert_eq!(allocated(s, "a1").await, "cpu=3,mem=1GiB");
    assert_eq!(s.get_agent("a1").await.unwrap().unwrap().idle_since, None);
    s.start_session("s1", t(21)).await.unwrap();

    let ended = s
        .cancel_session("s1", t(30), "cancelled by ann")
        .await
        .unwrap();
    assert_eq!(ended.session.state, SessionState::Cancelled);
    assert_eq!(ended.end_reason.as_deref(), Some("cancelled by ann"));
    assert_eq!(ended.updated_at, t(30));
    let states: Vec<SessionState> = ended.history.iter().map(|h| h.state).collect();
    assert_eq!(
        states,
        [
            SessionState::Pending,
            SessionState::Scheduled,
            SessionState::Running,
            SessionState::Cancelled
        ]
    );
    assert_eq!(allocated(s, "a1").await, "cpu=1");

    // The last session ending leaves the agent idle since then.
    s.end_session("s2", SessionState::Succeeded, t(40), "exit 0")
        .await
        .unwrap();
    let a1 = s.get_agent("a1").await.unwrap().unwrap();
    assert!(a1.allocated.is_empty());
    assert_eq!(a1.idle_since, Some(t(40)));

    assert!(matches!(
        s.cancel_session("s1", t(50), "again").await,
        Err(StoreError::Conflict {
            what: "session",
            ..
        })
    ));
    assert!(matches!(
        s.cancel_session("nope", t(50), "x").await,
        Err(StoreError::NotFound {
            what: "session",
            ..
        })
    ));
    assert!(matches!(
        s.end_session("s1", SessionState::Running, t(50), "x").await,
        Err(StoreError::Refused(_))
    ));
    let events = s
        .list_events(&EventFilter {
            session: Some("s1".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let kinds: Vec<&str> = events.iter().map(|e| e.kind.as_str()).collect();
    assert_eq!(kinds, ["cancelled", "placed"]);
    assert_eq!(events[0].message, "cancelled by ann");
});

on_both!(snapshot_reads_what_the_cycle_needs, |db| {
    let s = &db.store;
    let mut marked = agent("a2", "g", "cpu=8");
    marked.state = AgentState::Marked;
    let mut gone = agent("a3", "g", "cpu=8");
    gone.state = AgentState::Terminated;
    let mut lost = agent("a4", "g", "cpu=8");
    lost.state = AgentState::Lost;
    populate(
        s,
        "g",
        &[agent("a1", "g", "cpu=4"), marked, gone, lost],
        &[
            session("s1", "g", "ann", "cpu=1", 10),
            session("s2", "g", "ann", "cpu=1", 11),
            session("s3", "g", "ann", "cpu=1", 12),
        ],
    )
    .await;
    s.create_group(&group("other"), t(1)).await.unwrap();
    s.upsert_agent(&agent("b1", "other", "cpu=4"), t(1))
        .await
        .unwrap();
    s.insert_session(&session("o1", "other", "ann", "cpu=1", 1), &spec(), t(1))
        .await
        .unwrap();
    s.put_image(&Image {
        name: "cuda".into(),
        min_slots: slots("gpu=1"),
    })
    .await
    .unwrap();
    s.cancel_session("s3", t(13), "x").await.unwrap();
    let snap0 = s.snapshot("g", t(14)).await.unwrap();
    let launch = Decisions {
        launches: vec![Launch {
            template: "small".into(),
            count: 2,
            reason: "unmet demand".into(),
        }],
        placements: vec![place("s2", "a1", "cpu=1")],
        ..Default::default()
    };
    s.apply("g", &snap0, &launch, t(15)).await.unwrap();

    let snap = s.snapshot("g", t(99)).await.unwrap();
    assert_eq!(snap.now, t(99));
    assert_eq!(snap.group, group("g"));
    let agent_ids: Vec<&str> = snap.agents.iter().map(|a| a.id.0.as_str()).collect();
    assert_eq!(
        agent_ids,
        ["a1", "a2", "a4"],
        "not terminated, this group only"
    );
    let session_states: Vec<(&str, SessionState)> = snap
        .sessions
        .iter()
        .map(|x| (x.id.0.as_str(), x.state))
        .collect();
    assert_eq!(
        session_states,
        [("s1", SessionState::Pending)],
        "pending, this group only (FIFO needs no sessions holding capacity)"
    );
    // Fair share counts what each owner holds: under DRF the snapshot has those sessions too.
    let mut drf = snap.group.clone();
    drf.scheduler.sequencer = Sequencer::Drf;
    s.update_group(&drf, t(98)).await.unwrap();
    let snap_drf = s.snapshot("g", t(99)).await.unwrap();
    let session_states: Vec<(&str, SessionState)> = snap_drf
        .sessions
        .iter()
        .map(|x| (x.id.0.as_str(), x.state))
        .collect();
    assert_eq!(
        session_states,
        [
            ("s1", SessionState::Pending),
            ("s2", SessionState::Scheduled)
        ],
        "pending and holding capacity, this group only"
    );
    assert_eq!(snap_drf.sessions[1].agent, Some(AgentId("a1".into())));
    assert_eq!(snap.agents[0].allocated, slots("cpu=1"));
    assert_eq!(snap.images.len(), 1);
    assert_eq!(
        snap.in_flight,
        [InFlight {
            template: "small".into(),
            count: 2,
            since: t(15)
        }]
    );
    assert_eq!(snap.last_scale_out, Some(t(15)));
    assert!(matches!(
        s.snapshot("nope", t(1)).await,
        Err(StoreError::NotFound { what: "group", .. })
    ));
});

on_both!(apply_writes_every_decision, |db| {
    let s = &db.store;
    let mut a2 = agent("a2", "g", "cpu=4");
    a2.state = AgentState::Marked;
    let a3 = agent("a3", "g", "cpu=2");
    let mut a4 = agent("a4", "g", "cpu=2");
    a4.state = AgentState::Marked;
    let mut a5 = agent("a5", "g", "cpu=2");
    a5.state = AgentState::Marked;
    populate(
        s,
        "g",
        &[agent("a1", "g", "cpu=4"), a2, a3, a4, a5],
        &[
            session("s1", "g", "ann", "cpu=2", 10),
            session("s2", "g", "ann", "cpu=2", 11),
            session("s3", "g", "ann", "cpu=64", 12),
            session("s4", "g", "bob", "cpu=4", 13),
            session("s5", "g", "bob", "cpu=1", 14),
        ],
    )
    .await;
    // Backfill that lets a blocked session hold the queue for 3 passes: blocked passes count.
    let mut g = group("g");
    g.scheduler.skip_after = 3;
    s.update_group(&g, t(1)).await.unwrap();
    let snap = s.snapshot("g", t(100)).await.unwrap();
    let decisions = Decisions {
        rejections: vec![Rejection {
            session: SessionId("s3".into()),
            reason: Infeasible::Exceeds(vec![Excess {
                slot: SlotName::new("cpu").unwrap(),
                requested: Quantity::from_units(64).unwrap(),
                largest: Quantity::from_units(4).unwrap(),
            }]),
        }],
        launches: vec![Launch {
            template: "small".into(),
            count: 1,
            reason: "for s4".into(),
        }],
        marks: vec![agent_decision("a3", "idle for more than 60 s")],
        unmarks: vec![
            agent_decision("a2", "demand returned"),
            agent_decision("a5", "keeps the headroom"),
        ],
        terminations: vec![agent_decision("a4", "marked and empty")],
        // s2 goes to a2, which is unmarked in the same pass.
        placements: vec![place("s1", "a1", "cpu=2"), place("s2", "a2", "cpu=2")],
        waiting: vec![
            Waiting {
                session: SessionId("s4".into()),
                reason: WaitReason::Launching {
                    template: "small".into(),
                },
            },
            Waiting {
                session: SessionId("s5".into()),
                reason: WaitReason::HeldBehind {
                    session: SessionId("s4".into()),
                },
            },
        ],
        scale_out_demand: slots("cpu=4"),
        recheck_at: None,
    };
    let applied = s.apply("g", &snap, &decisions, t(100)).await.unwrap();
    assert_eq!(
        (
            applied.placed,
            applied.rejected,
            applied.waiting,
            applied.launched
        ),
        (2, 1, 2, 1)
    );
    assert_eq!(
        (
            applied.marked,
            applied.unmarked,
            applied.terminated,
            applied.events
        ),
        (1, 2, 1, 8)
    );

    let s1 = s.get_session("s1").await.unwrap().unwrap();
    assert_eq!(s1.session.state, SessionState::Scheduled);
    assert_eq!(s1.session.agent, Some(AgentId("a1".into())));
    assert_eq!(s1.allocation, Some(slots("cpu=2")));
    assert_eq!(
        s1.history.last().unwrap().reason,
        "placed on agent a1 (cpu=2)"
    );
    assert_eq!(session_state(s, "s2").await, SessionState::Scheduled);
    let s3 = s.get_session("s3").await.unwrap().unwrap();
    assert_eq!(s3.session.state, SessionState::Rejected);
    assert_eq!(
        s3.end_reason.as_deref(),
        Some("cpu=64 requested; the largest agent or template offers cpu=4")
    );
    assert_eq!(s3.history.last().unwrap().state, SessionState::Rejected);
    let s4 = s.get_session("s4").await.unwrap().unwrap();
    assert_eq!(
        s4.wait_reason.as_deref(),
        Some("waits for a new small instance (launched in this pass)")
    );
    assert_eq!(s4.session.blocked_passes, 1, "it found no room");
    let s5 = s.get_session("s5").await.unwrap().unwrap();
    assert!(s5
        .wait_reason
        .unwrap()
        .starts_with("held behind session s4"));
    assert_eq!(s5.session.blocked_passes, 0, "held behind is not blocked");

    let agents = s.list_agents(Some("g")).await.unwrap();
    let view: Vec<(&str, AgentState, String, Option<Timestamp>)> = agents
        .iter()
        .map(|a| {
            (
                a.id.0.as_str(),
                a.state,
                a.allocated.to_string(),
                a.idle_since,
            )
        })
        .collect();
    assert_eq!(
        view,
        [
            ("a1", AgentState::Alive, "cpu=2".into(), None),
            ("a2", AgentState::Alive, "cpu=2".into(), None),
            ("a3", AgentState::Marked, "".into(), Some(t(1))),
            ("a4", AgentState::Terminated, "".into(), Some(t(1))),
            // Unmarked while idle: its idle time starts again.
            ("a5", AgentState::Alive, "".into(), Some(t(100))),
        ]
    );
    let in_flight = s
        .list_instances("g", &InstancePhase::IN_FLIGHT)
        .await
        .unwrap();
    assert_eq!(in_flight.len(), 1, "one row per instance");
    assert_eq!(
        (in_flight[0].template.as_str(), in_flight[0].phase),
        ("small", InstancePhase::Requested)
    );
    assert_eq!(
        s.snapshot("g", t(101)).await.unwrap().last_scale_out,
        Some(t(100))
    );

    let events = s
        .list_events(&EventFilter {
            group: Some("g".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let mut log: Vec<(String, String)> = events
        .iter()
        .map(|e| (e.kind.clone(), e.message.clone()))
        .collect();
    log.reverse();
    assert_eq!(
        log,
        [
            (
                "rejected",
                "cpu=64 requested; the largest agent or template offers cpu=4"
            ),
            ("launch", "1 × small: for s4"),
            ("unmark", "demand returned"),
            ("unmark", "keeps the headroom"),
            ("mark", "idle for more than 60 s"),
            ("terminate", "marked and empty"),
            ("placed", "placed on agent a1 (cpu=2)"),
            ("placed", "placed on agent a2 (cpu=2)"),
        ]
        .map(|(k, m)| (k.to_string(), m.to_string()))
    );
    let placed = events.iter().find(|e| e.kind == "placed").unwrap();
    assert_eq!(placed.session.as_deref(), Some("s2"));
    assert_eq!(placed.agent.as_deref(), Some("a2"));

    // The next pass sees the result: nothing is placed twice.
    let again = s.snapshot("g", t(200)).await.unwrap();
    assert!(cycle(&again)
        .placements
        .iter()
        .all(|p| p.session.0 != "s1" && p.session.0 != "s2"));
});

on_both!(apply_refuses_decisions_that_contradict_the_snapshot, |db| {
    let s = &db.store;
    let mut marked = agent("a2", "g", "cpu=4");
    marked.state = AgentState::Marked;
    let mut drained = agent("a3", "g", "cpu=4");
    drained.state = AgentState::Marked;
    drained.drained_by_hand = true;
    populate(
        s,
        "g",
        &[agent("a1", "g", "cpu=4"), marked, drained],
        &[session("s1", "g", "ann", "cpu=2", 10)],
    )
    .await;
    let snap = s.snapshot("g", t(20)).await.unwrap();
    let cases = [
        Decisions {
            placements: vec![place("s1", "a2", "cpu=2")],
            ..Default::default()
        },
        Decisions {
            placements: vec![place("s1", "a1", "cpu=5")],
            ..Default::default()
        },
        Decisions {
            unmarks: vec![agent_decision("a3", "demand")],
            ..Default::default()
        },
        Decisions {
            marks: vec![agent_decision("a1", "idle")],
            terminations: vec![agent_decision("a1", "empty")],
            ..Default::default()
        },
        Decisions {
            placements: vec![place("s1", "zz", "cpu=1")],
            ..Default::default()
        },
        Decisions {
            placements: vec![place("s1", "a1", "cpu=1"), place("s1", "a1", "cpu=1")],
            ..Default::default()
        },
    ];
    for d in &cases {
        let err = s.apply("g", &snap, d, t(20)).await.unwrap_err();
        assert!(matches!(err, StoreError::Refused(_)), "{err}");
    }
    assert_eq!(session_state(s, "s1").await, SessionState::Pending);
    assert_eq!(allocated(s, "a1").await, "");
});

on_both!(race_second_apply_from_same_snapshot_conflicts, |db| {
    let s = &db.store;
    populate(
        s,
        "g",
        &[agent("a1", "g", "cpu=4")],
        &[
            session("s1", "g", "ann", "cpu=3", 10),
            session("s2", "g", "bob", "cpu=3", 11),
            session("s3", "g", "bob", "cpu=99", 12),
        ],
    )
    .await;
    // Two managers read the same snapshot; each places a different session on a1, which holds
    // only one of them.
    let snap = s.snapshot("g", t(20)).await.unwrap();
    let first = Decisions {
        placements: vec![place("s1", "a1", "cpu=3")],
        ..Default::default()
    };
    let second = Decisions {
        rejections: vec![Rejection {
            session: SessionId("s3".into()),
            reason: Infeasible::NoCapacity,
        }],
        launches: vec![Launch {
            template: "small".into(),
            count: 1,
            reason: "r".into(),
        }],
        placements: vec![place("s2", "a1", "cpu=3")],
        ..Default::default()
    };
    s.apply("g", &snap, &first, t(21)).await.unwrap();
    let events_before = s.list_events(&EventFilter::default()).await.unwrap().len();
    let err = s.apply("g", &snap, &second, t(22)).await.unwrap_err();
    assert!(
        matches!(&err, StoreError::Conflict { what: "agent", id } if id == "a1"),
        "{err}"
    );
    // Nothing of the second pass was written, not even what came before the failed guard.
    assert_eq!(allocated(s, "a1").await, "cpu=3");
    assert_eq!(session_state(s, "s1").await, SessionState::Scheduled);
    assert_eq!(session_state(s, "s2").await, SessionState::Pending);
    assert_eq!(session_state(s, "s3").await, SessionState::Pending);
    assert_eq!(s.get_session("s2").await.unwrap().unwrap().history.len(), 1);
    assert!(s
        .list_instances("g", &InstancePhase::IN_FLIGHT)
        .await
        .unwrap()
        .is_empty());
    assert_eq!(s.snapshot("g", t(23)).await.unwrap().last_scale_out, None);
    assert_eq!(
        s.list_events(&EventFilter::default()).await.unwrap().len(),
        events_before
    );

    // Re-reading and recomputing gives a pass that applies.
    let fresh = s.snapshot("g", t(30)).await.unwrap();
    let d = cycle(&fresh);
    assert!(d.placements.is_empty(), "a1 has no room for s2 any more");
    s.apply("g", &fresh, &d, t(30)).await.unwrap();
    assert_eq!(allocated(s, "a1").await, "cpu=3");
});

on_both!(race_guards_launches_and_ended_sessions, |db| {
    let s = &db.store;
    populate(
        s,
        "g",
        &[agent("a1", "g", "cpu=4")],
        &[session("s1", "g", "ann", "cpu=1", 10)],
    )
    .await;
    let snap = s.snapshot("g", t(20)).await.unwrap();
    // Two passes from one snapshot both launch: only the first does.
    let launch = Decisions {
        launches: vec![Launch {
            template: "small".into(),
            count: 2,
            reason: "demand".into(),
        }],
        ..Default::default()
    };
    s.apply("g", &snap, &launch, t(21)).await.unwrap();
    assert!(matches!(
        s.apply("g", &snap, &launch, t(22)).await,
        Err(StoreError::Conflict { what: "group", .. })
    ));
    assert_eq!(
        s.list_instances("g", &InstancePhase::IN_FLIGHT)
            .await
            .unwrap()
            .len(),
        2,
        "the first pass's two instances only"
    );

    // A session cancelled after the snapshot is not placed.
    let snap = s.snapshot("g", t(30)).await.unwrap();
    s.cancel_session("s1", t(31), "changed my mind")
        .await
        .unwrap();
    let placing = Decisions {
        placements: vec![place("s1", "a1", "cpu=1")],
        ..Default::default()
    };
    assert!(matches!(
        s.apply("g", &snap, &placing, t(32)).await,
        Err(StoreError::Conflict {
            what: "session",
            ..
        })
    ));
    assert_eq!(allocated(s, "a1").await, "");
    assert_eq!(session_state(s, "s1").await, SessionState::Cancelled);
});

on_both!(concurrent_applies_place_once, |db| {
    let s = &db.store;
    let sessions: Vec<Session> = (0..8)
        .map(|i| session(&format!("s{i}"), "g", "ann", "cpu=1", i))
        .collect();
    populate(s, "g", &[agent("a1", "g", "cpu=4")], &sessions).await;
    // Both passes read before either writes, then race to commit.
    let snap = s.snapshot("g", t(20)).await.unwrap();
    let d = cycle(&snap);
    assert_eq!(d.placements.len(), 4);
    let (x, y) = tokio::join!(
        s.apply("g", &snap, &d, t(21)),
        s.apply("g", &snap, &d, t(21))
    );
    let ok = [&x, &y].iter().filter(|r| r.is_ok()).count();
    assert_eq!(ok, 1, "{x:?} {y:?}");
    assert!([&x, &y]
        .iter()
        .any(|r| matches!(r, Err(StoreError::Conflict { .. }))));
    assert_eq!(allocated(s, "a1").await, "cpu=4");
    let scheduled = s
        .list_sessions(&SessionFilter {
            state: Some(SessionState::Scheduled),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(scheduled.len(), 4);
});

on_both!(agents_upsert_and_idle_time, |db| {
    let s = &db.store;
    s.create_group(&group("g"), t(1)).await.unwrap();
    let mut a = agent("a1", "g", "cpu=4,gpu=0.5,mem=16GiB");
    a.external = true;
    s.upsert_agent(&a, t(10)).await.unwrap();
    let got = s.get_agent("a1").await.unwrap().unwrap();
    assert_eq!(
        got.idle_since,
        Some(t(10)),
        "joined empty: idle since it joined"
    );
    assert_eq!(
        Agent {
            idle_since: None,
            ..got.clone()
        },
        a
    );
    // Still idle at the next report: the idle time is kept.
    s.upsert_agent(&a, t(20)).await.unwrap();
    assert_eq!(
        s.get_agent("a1").await.unwrap().unwrap().idle_since,
        Some(t(10))
    );
    a.allocated = slots("cpu=1");
    s.upsert_agent(&a, t(30)).await.unwrap();
    assert_eq!(s.get_agent("a1").await.unwrap().unwrap().idle_since, None);
    a.allocated = Slots::new();
    s.upsert_agent(&a, t(40)).await.unwrap();
    assert_eq!(
        s.get_agent("a1").await.unwrap().unwrap().idle_since,
        Some(t(40))
    );

    s.set_agent_state("a1", AgentState::Marked, true, t(50))
        .await
        .unwrap();
    let drained = s.get_agent("a1").await.unwrap().unwrap();
    assert_eq!(
        (drained.state, drained.drained_by_hand),
        (AgentState::Marked, true)
    );
    s.set_agent_state("a1", AgentState::Alive, false, t(60))
        .await
        .unwrap();
    assert_eq!(
        s.get_agent("a1").await.unwrap().unwrap().idle_since,
        Some(t(60))
    );
    assert!(matches!(
        s.set_agent_state("nope", AgentState::Lost, false, t(1))
            .await,
        Err(StoreError::NotFound { what: "agent", .. })
    ));
    assert!(matches!(
        s.upsert_agent(&agent("b", "nope", "cpu=1"), t(1)).await,
        Err(StoreError::NotFound { what: "group", .. })
    ));
    s.create_group(&group("h"), t(1)).await.unwrap();
    s.upsert_agent(&agent("b1", "h", "cpu=1"), t(1))
        .await
        .unwrap();
    assert_eq!(s.list_agents(None).await.unwrap().len(), 2);
    assert_eq!(s.list_agents(Some("h")).await.unwrap().len(), 1);
});

on_both!(events_page_newest_first, |db| {
    let s = &db.store;
    let mut ids = Vec::new();
    for i in 0..5 {
        let id = s
            .record_event(&NewEvent {
                at: t(i),
                group: Some(if i % 2 == 0 { "g" } else { "h" }.into()),
                session: (i == 3).then(|| "s3".to_string()),
                agent: (i == 4).then(|| "a4".to_string()),
                kind: "note".into(),
                message: format!("event {i}"),
            })
            .await
            .unwrap();
        ids.push(id);
    }
    assert!(ids.windows(2).all(|w| w[0] < w[1]));
    let messages = |events: Vec<corral_store::Event>| -> Vec<String> {
        events.into_iter().map(|e| e.message).collect()
    };
    let first = s
        .list_events(&EventFilter {
            limit: Some(2),
            ..Default::default()
        })
        .await
        .unwrap();
    let next = first.last().unwrap().id;
    assert_eq!(messages(first), ["event 4", "event 3"]);
    let rest = s
        .list_events(&EventFilter {
            before_id: Some(next),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(messages(rest), ["event 2", "event 1", "event 0"]);
    // Following: the events above an id, oldest first.
    let newer = s
        .list_events(&EventFilter {
            after_id: Some(ids[2]),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(messages(newer), ["event 3", "event 4"]);
    let in_g = s
        .list_events(&EventFilter {
            group: Some("g".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(messages(in_g), ["event 4", "event 2", "event 0"]);
    let of_s3 = s
        .list_events(&EventFilter {
            session: Some("s3".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(messages(of_s3), ["event 3"]);
    let of_a4 = s
        .list_events(&EventFilter {
            agent: Some("a4".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(of_a4[0].at, t(4));
    assert_eq!(of_a4[0].group.as_deref(), Some("g"));
});

on_both!(tokens_by_hash, |db| {
    let s = &db.store;
    assert_eq!(s.count_tokens().await.unwrap(), 0);
    s.insert_token("t1", "ab12", Role::Admin, "root", t(5))
        .await
        .unwrap();
    s.insert_token("t2", "cd34", Role::User, "ann", t(6))
        .await
        .unwrap();
    let found = s.find_token_by_hash("cd34", t(7)).await.unwrap().unwrap();
    assert_eq!(
        (
            found.id.as_str(),
            found.role,
            found.user.as_str(),
            found.created_at
        ),
        ("t2", Role::User, "ann", t(6))
    );
    assert_eq!(s.find_token_by_hash("zz", t(7)).await.unwrap(), None);
    // A bootstrap token is a credential until it is used up or expires.
    s.insert_bootstrap_token("b1", "ef56", "g", None, t(20), t(6))
        .await
        .unwrap();
    assert!(s.find_token_by_hash("ef56", t(19)).await.unwrap().is_some());
    assert_eq!(
        s.find_token_by_hash("ef56", t(20)).await.unwrap(),
        None,
        "expired"
    );
    assert_eq!(
        s.consume_bootstrap_token("ef56", "a1", t(10))
            .await
            .unwrap()
            .as_deref(),
        Some("g")
    );
    assert_eq!(
        s.find_token_by_hash("ef56", t(11)).await.unwrap(),
        None,
        "used up"
    );
    assert_eq!(s.count_tokens().await.unwrap(), 3);
    for (id, hash) in [("t1", "new"), ("t3", "ab12")] {
        assert!(matches!(
            s.insert_token(id, hash, Role::User, "bob", t(7)).await,
            Err(StoreError::Conflict { what: "token", .. })
        ));
    }
});

on_both!(rows_survive_reopening, |db| {
    let mut a = agent("a1", "g", "cpu=4,mem=8GiB");
    a.drained_by_hand = true;
    a.state = AgentState::Marked;
    populate(
        &db.store,
        "g",
        &[a],
        &[session("s1", "g", "ann", "cpu=1,mem=512MiB", 10)],
    )
    .await;
    db.store
        .insert_token("t1", "ab12", Role::Admin, "root", t(5))
        .await
        .unwrap();
    db.store
        .record_event(&NewEvent {
            at: t(7),
            kind: "note".into(),
            message: "hello".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let before = db.store.snapshot("g", t(50)).await.unwrap();
    let session_before = db.store.get_session("s1").await.unwrap();
    db.reopen().await;
    let s = &db.store;
    assert_eq!(s.snapshot("g", t(50)).await.unwrap(), before);
    assert_eq!(s.get_session("s1").await.unwrap(), session_before);
    assert!(s.find_token_by_hash("ab12", t(50)).await.unwrap().is_some());
    let events = s.list_events(&EventFilter::default()).await.unwrap();
    assert_eq!(events[0].message, "hello");
});

on_both!(corrupt_rows_are_typed_errors, |db| {
    let s = &db.store;
    populate(
        s,
        "g",
        &[agent("a1", "g", "cpu=4")],
        &[session("s1", "g", "ann", "cpu=1", 10)],
    )
    .await;
    db.exec("UPDATE agents SET allocated = 'cpu=banana' WHERE id = 'a1'")
        .await;
    let err = s.get_agent("a1").await.unwrap_err();
    assert!(
        matches!(&err, StoreError::Corrupt(m) if m.contains("agent \"a1\"") && m.contains("allocated") && m.contains("banana")),
        "{err}"
    );
    assert!(matches!(
        s.snapshot("g", t(1)).await,
        Err(StoreError::Corrupt(_))
    ));
    db.exec("UPDATE sessions SET state = 'sleeping' WHERE id = 's1'")
        .await;
    let err = s.get_session("s1").await.unwrap_err();
    assert!(
        matches!(&err, StoreError::Corrupt(m) if m.contains("state") && m.contains("sleeping")),
        "{err}"
    );
    db.exec("UPDATE groups SET policy = '{\"kind\": 7}' WHERE name = 'g'")
        .await;
    assert!(matches!(
        s.list_groups().await,
        Err(StoreError::Corrupt(m)) if m.contains("policy")
    ));
});

#[tokio::test]
async fn bad_urls_are_refused() {
    for url in ["mysql://x/y", "sqlite::memory:", "nothing"] {
        assert!(
            matches!(Store::open(url).await, Err(StoreError::BadUrl(_))),
            "{url}"
        );
    }
}

#[tokio::test]
async fn sqlite_dir_is_created_and_odd_paths_work() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("state dir #1?");
    let store = Store::open_sqlite_dir(&data).await.unwrap();
    assert_eq!(store.backend(), Backend::Sqlite);
    store.create_group(&group("g"), t(1)).await.unwrap();
    store.close().await;
    assert!(data.join("corral.db").is_file());
    let again = Store::open_sqlite_dir(&data).await.unwrap();
    assert!(again.get_group("g").await.unwrap().is_some());
}

/// Two stores on one SQLite file stand for two processes: their write transactions take the
/// file's lock in turn (BEGIN IMMEDIATE + busy timeout) instead of failing with SQLITE_BUSY,
/// and the race guard still lets only one of two passes from one snapshot through.
#[tokio::test]
async fn sqlite_two_processes_take_turns() {
    let dir = tempfile::tempdir().unwrap();
    let one = Store::open_sqlite_dir(dir.path()).await.unwrap();
    let two = Store::open_sqlite_dir(dir.path()).await.unwrap();
    populate(&one, "g", &[agent("a1", "g", "cpu=4")], &[]).await;
    let writes = |store: Store, prefix: &'static str| async move {
        for i in 0..40 {
            let s = session(&format!("{prefix}{i}"), "g", "ann", "cpu=1", i);
            store.insert_session(&s, &spec(), t(i)).await?;
        }
        Ok::<_, StoreError>(())
    };
    let (x, y) = tokio::join!(writes(one.clone(), "x"), writes(two.clone(), "y"));
    x.unwrap();
    y.unwrap();
    let all = one.list_sessions(&SessionFilter::default()).await.unwrap();
    assert_eq!(all.len(), 80);

    let snap = one.snapshot("g", t(100)).await.unwrap();
    let d = cycle(&snap);
    assert_eq!(d.placements.len(), 4);
    let (x, y) = tokio::join!(
        one.apply("g", &snap, &d, t(101)),
        two.apply("g", &snap, &d, t(101))
    );
    assert_eq!(
        [&x, &y].iter().filter(|r| r.is_ok()).count(),
        1,
        "{x:?} {y:?}"
    );
    assert_eq!(allocated(&one, "a1").await, "cpu=4");
}

on_both!(instances_follow_launches_joins_and_terminations, |db| {
    let s = &db.store;
    populate(s, "g", &[], &[]).await;
    let snap = s.snapshot("g", t(10)).await.unwrap();
    let launch = Decisions {
        launches: vec![Launch {
            template: "small".into(),
            count: 2,
            reason: "demand".into(),
        }],
        ..Default::default()
    };
    s.apply("g", &snap, &launch, t(11)).await.unwrap();
    let rows = s
        .list_instances("g", &InstancePhase::IN_FLIGHT)
        .await
        .unwrap();
    assert_eq!(rows.len(), 2);
    assert!(rows.iter().all(|r| r.phase == InstancePhase::Requested
        && r.template == "small"
        && r.id.starts_with("g-")
        && r.provider_id.is_none()));
    let id = rows[0].id.clone();

    // The provider started it: it is still in flight, now with its vendor id.
    let to_provisioning = |now| {
        s.move_instance(
            &id,
            &[InstancePhase::Requested],
            InstancePhase::Provisioning,
            Some("i-1"),
            "launched",
            t(now),
        )
    };
    assert!(to_provisioning(12).await.unwrap());
    assert!(
        !to_provisioning(13).await.unwrap(),
        "moves only from where it is"
    );
    assert_eq!(s.snapshot("g", t(14)).await.unwrap().in_flight[0].count, 2);

    // Its agent joined: one left in flight.
    assert!(s
        .move_instance(
            &id,
            &[InstancePhase::Provisioning],
            InstancePhase::Joined,
            None,
            "joined",
            t(15)
        )
        .await
        .unwrap());
    assert_eq!(s.snapshot("g", t(16)).await.unwrap().in_flight[0].count, 1);
    let joined = s.get_instance(&id).await.unwrap().unwrap();
    assert_eq!(
        (joined.phase, joined.provider_id.as_deref()),
        (InstancePhase::Joined, Some("i-1")),
        "the vendor id is kept"
    );

    // The cycle lets its agent go: the provider is to terminate the instance.
    let mut a = agent(&id, "g", "cpu=2");
    a.state = AgentState::Marked;
    s.upsert_agent(&a, t(17)).await.unwrap();
    let snap = s.snapshot("g", t(18)).await.unwrap();
    let let_go = Decisions {
        terminations: vec![AgentDecision {
            agent: AgentId(id.clone()),
            reason: "idle".into(),
        }],
        ..Default::default()
    };
    s.apply("g", &snap, &let_go, t(19)).await.unwrap();
    let terminating = s
        .list_instances("g", &[InstancePhase::Terminating])
        .await
        .unwrap();
    assert_eq!(terminating.len(), 1);
    assert_eq!(terminating[0].id, id);
    // What the metrics show: per group and phase.
    let count = |phase: &str, n| ("g".to_string(), phase.to_string(), n);
    assert_eq!(
        s.count_instances().await.unwrap(),
        [count("requested", 1), count("terminating", 1)]
    );
    assert!(matches!(
        s.delete_group("g").await,
        Err(StoreError::Refused(m)) if m.contains("instance")
    ));
});

on_both!(provider_configuration_and_instance_bootstrap_tokens, |db| {
    let s = &db.store;
    populate(s, "g", &[], &[]).await;
    assert_eq!(s.get_group_provider("g").await.unwrap(), None, "static");
    let config = r#"{"name":"process"}"#;
    s.set_group_provider("g", Some(config), t(1)).await.unwrap();
    assert_eq!(
        s.get_group_provider("g").await.unwrap().as_deref(),
        Some(config)
    );
    assert!(matches!(
        s.get_group_provider("nope").await,
        Err(StoreError::NotFound { .. })
    ));
    assert!(matches!(
        s.set_group_provider("nope", None, t(1)).await,
        Err(StoreError::NotFound { .. })
    ));

    // A token made for one instance joins that agent id only, once.
    s.insert_bootstrap_token("tok", "hash", "g", Some("g-1"), t(100), t(1))
        .await
        .unwrap();
    assert_eq!(
        s.consume_bootstrap_token("hash", "g-2", t(2))
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        s.consume_bootstrap_token("hash", "g-1", t(2))
            .await
            .unwrap()
            .as_deref(),
        Some("g")
    );
    assert_eq!(
        s.consume_bootstrap_token("hash", "g-1", t(3))
            .await
            .unwrap(),
        None
    );
});

on_both!(batch_bindings_and_owners_are_kept_per_group, |db| {
    let store = &db.store;
    for g in ["g", "h"] {
        store.create_group(&group(g), t(1)).await.unwrap();
    }
    assert_eq!(store.get_group_batch("g").await.unwrap(), None);
    store
        .set_group_batch("g", Some(r#"{"system":"slurm"}"#), t(2))
        .await
        .unwrap();
    assert_eq!(
        store.get_group_batch("g").await.unwrap().as_deref(),
        Some(r#"{"system":"slurm"}"#)
    );
    assert!(store.set_group_batch("nope", None, t(2)).await.is_err());

    let job = |id: &str, owner: &str| BatchJobRecord {
        job_id: id.into(),
        owner: owner.into(),
        ..BatchJobRecord::default()
    };
    store
        .record_batch_job("g", &job("12", "alice"), t(3))
        .await
        .unwrap();
    store
        .record_batch_job("g", &job("13", "bob"), t(4))
        .await
        .unwrap();
    store
        .record_batch_job("h", &job("12", "bob"), t(3))
        .await
        .unwrap();
    let ids = |list: &[&str]| list.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let listed = ids(&["11", "12", "13"]);
    assert_eq!(
        store
            .batch_owners("g", &listed, Some("alice"))
            .await
            .unwrap(),
        vec![("12".to_string(), "alice".to_string())]
    );
    assert_eq!(
        store.batch_owners("g", &listed, None).await.unwrap(),
        vec![
            ("12".to_string(), "alice".to_string()),
            ("13".to_string(), "bob".to_string())
        ]
    );
    // Only the ids asked for, however many there are.
    assert!(store.batch_owners("g", &[], None).await.unwrap().is_empty());
    let many: Vec<String> = (0..1200).map(|i| i.to_string()).collect();
    assert_eq!(store.batch_owners("g", &many, None).await.unwrap().len(), 2);
    assert_eq!(
        store.batch_job("h", "12").await.unwrap(),
        Some(job("12", "bob"))
    );
    assert_eq!(store.batch_job("g", "14").await.unwrap(), None);

    store.delete_group("g").await.unwrap();
    store.create_group(&group("g"), t(5)).await.unwrap();
    assert!(
        store
            .batch_owners("g", &listed, None)
            .await
            .unwrap()
            .is_empty(),
        "forgotten with the group"
    );
    assert_eq!(
        store.batch_owners("h", &listed, None).await.unwrap().len(),
        1
    );
});

on_both!(a_batch_jobs_inputs_are_awaited_one_by_one, |db| {
    let store = &db.store;
    store.create_group(&group("g"), t(1)).await.unwrap();
    let job = BatchJobRecord {
        job_id: "7".into(),
        owner: "alice".into(),
        directory: Some("/scratch/corral/alice/x".into()),
        awaiting: vec!["a.txt".into(), "data/b.csv".into()],
        outputs: vec!["out".into()],
        release_after_inputs: true,
        session: None,
    };
    store.record_batch_job("g", &job, t(2)).await.unwrap();
    assert_eq!(store.batch_job("g", "7").await.unwrap(), Some(job.clone()));
    let left = store
        .batch_input_received("g", "7", "data/b.csv")
        .await
        .unwrap();
    assert_eq!(left, Some(vec!["a.txt".to_string()]));
    // Not awaited (again, or never): nothing changes.
    assert_eq!(
        store
            .batch_input_received("g", "7", "data/b.csv")
            .await
            .unwrap(),
        None
    );
    assert_eq!(
        store.batch_input_received("g", "7", "c").await.unwrap(),
        None
    );
    assert_eq!(
        store.batch_input_received("g", "8", "a.txt").await.unwrap(),
        None
    );
    let left = store.batch_input_received("g", "7", "a.txt").await.unwrap();
    assert_eq!(left, Some(vec![]));
    let stored = store.batch_job("g", "7").await.unwrap().unwrap();
    assert!(
        stored.awaiting.is_empty() && stored.outputs == job.outputs && stored.release_after_inputs
    );
});

on_both!(sessions_run_as_batch_jobs_are_left_to_their_jobs, |db| {
    let store = &db.store;
    store.create_group(&group("g"), t(1)).await.unwrap();
    store
        .set_group_batch("g", Some(r#"{"system":"slurm"}"#), t(1))
        .await
        .unwrap();
    let spec = serde_json::json!({"command": ["true"]});
    let on_agents = session("s1", "g", "alice", "cpu=1", 2);
    store.insert_session(&on_agents, &spec, t(2)).await.unwrap();
    let as_job = session("s2", "g", "alice", "cpu=1", 3);
    let job = BatchJobRecord {
        job_id: "41".into(),
        owner: "alice".into(),
        directory: Some("/w/alice/s2".into()),
        ..BatchJobRecord::default()
    };
    store
        .insert_batch_session(&as_job, &spec, &job, t(3))
        .await
        .unwrap();
    assert!(matches!(
        store.insert_batch_session(&as_job, &spec, &job, t(3)).await,
        Err(StoreError::Conflict { .. })
    ));
    let recorded = store.batch_job("g", "41").await.unwrap().unwrap();
    assert_eq!(recorded.session.as_deref(), Some("s2"));
    assert_eq!(recorded.owner, "alice");
    let got = store.get_session("s2").await.unwrap().unwrap();
    assert_eq!(got.batch_job.as_deref(), Some("41"));
    assert_eq!(got.session.state, SessionState::Pending);

    // The cycle sees only the session that runs on agents.
    let snapshot = store.snapshot("g", t(4)).await.unwrap();
    let ids: Vec<&str> = snapshot.sessions.iter().map(|s| s.id.0.as_str()).collect();
    assert_eq!(ids, ["s1"]);
    let active = store.active_batch_sessions("g").await.unwrap();
    assert_eq!(active.len(), 1);
    assert_eq!(active[0].session.id.0, "s2");

    store
        .set_wait_reason("s2", Some("slurm: Priority"))
        .await
        .unwrap();
    let got = store.get_session("s2").await.unwrap().unwrap();
    assert_eq!(got.wait_reason.as_deref(), Some("slurm: Priority"));
    assert!(matches!(
        store.start_batch_session("s1", t(5), "started").await,
        Err(StoreError::Conflict { .. })
    ));
    store
        .start_batch_session("s2", t(5), "job 41 started")
        .await
        .unwrap();
    let got = store.get_session("s2").await.unwrap().unwrap();
    assert_eq!(got.session.state, SessionState::Running);
    assert_eq!((got.started_at, got.wait_reason), (Some(t(5)), None));
    assert_eq!(got.history.last().unwrap().reason, "job 41 started");
    store
        .finish_session("s2", SessionState::Failed, Some(3), t(6), "exit 3")
        .await
        .unwrap();
    assert!(store.active_batch_sessions("g").await.unwrap().is_empty());
    assert_eq!(
        store.bound_groups().await.unwrap(),
        vec![("g".to_string(), r#"{"system":"slurm"}"#.to_string())]
    );
});

on_both!(
    an_agent_that_runs_nothing_is_removed_with_its_tokens,
    |db| {
        let s = &db.store;
        populate(
            s,
            "g",
            &[agent("a1", "g", "cpu=4")],
            &[session("s1", "g", "alice", "cpu=1", 1)],
        )
        .await;
        s.insert_token("t-agent", "hash-agent", Role::Agent, "a1", t(2))
            .await
            .unwrap();
        s.insert_token("t-alice", "hash-alice", Role::User, "alice", t(2))
            .await
            .unwrap();
        let snap = s.snapshot("g", t(3)).await.unwrap();
        let placed = Decisions {
            placements: vec![place("s1", "a1", "cpu=1")],
            ..Default::default()
        };
        s.apply("g", &snap, &placed, t(3)).await.unwrap();

        // While it runs a session it stays, and the refusal names the session.
        match s.remove_agent("a1", true, true, t(4)).await {
            Err(StoreError::Refused(why)) => assert!(why.contains("s1"), "{why}"),
            other => panic!("{other:?}"),
        }
        assert!(s.get_agent("a1").await.unwrap().is_some());
        s.cancel_session("s1", t(5), "x").await.unwrap();
        let removed = s.remove_agent("a1", true, true, t(6)).await.unwrap();
        assert_eq!(
            (removed.group.as_str(), removed.revoked, removed.released),
            ("g", vec!["hash-agent".to_string()], vec![])
        );
        assert!(s.get_agent("a1").await.unwrap().is_none());
        let left: Vec<String> = s
            .list_tokens()
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.id)
            .collect();
        assert_eq!(left, ["t-alice"], "the user's token stays");
        let removed = s
            .list_events(&EventFilter::default())
            .await
            .unwrap()
            .into_iter()
            .any(|e| e.kind == "removed" && e.agent.as_deref() == Some("a1"));
        assert!(removed);
        assert!(matches!(
            s.remove_agent("a1", true, true, t(7)).await,
            Err(StoreError::NotFound { .. })
        ));
        // With its agent gone and its session ended, the group can go.
        s.delete_group("g").await.unwrap();
    }
);

on_both!(
    tokens_are_listed_without_secrets_and_the_last_admin_stays,
    |db| {
        let s = &db.store;
        s.insert_token("t1", "h1", Role::Admin, "root", t(1))
            .await
            .unwrap();
        s.insert_token("t2", "h2", Role::User, "bob", t(2))
            .await
            .unwrap();
        let listed = s.list_tokens().await.unwrap();
        assert_eq!(
            listed
                .iter()
                .map(|t| (t.id.as_str(), t.role, t.user.as_str()))
                .collect::<Vec<_>>(),
            [("t1", Role::Admin, "root"), ("t2", Role::User, "bob")]
        );
        assert!(!serde_json::to_string(&listed).unwrap().contains("h1"));
        assert_eq!(s.revoke_token("t2").await.unwrap(), "h2");
        assert!(s.find_token_by_hash("h2", t(3)).await.unwrap().is_none());
        assert!(matches!(
            s.revoke_token("t2").await,
            Err(StoreError::NotFound { .. })
        ));
        assert!(matches!(
            s.revoke_token("t1").await,
            Err(StoreError::Refused(_))
        ));
        s.insert_token("t3", "h3", Role::Admin, "ops", t(4))
            .await
            .unwrap();
        assert_eq!(s.revoke_token("t1").await.unwrap(), "h1");
    }
);

on_both!(
    an_agents_token_from_a_join_supersedes_its_older_ones_once_used,
    |db| {
        let s = &db.store;
        let agent_tokens = |listed: Vec<corral_api::tokens::TokenInfo>| {
            listed
                .into_iter()
                .filter(|t| t.user == "a1")
                .map(|t| t.id)
                .collect::<Vec<_>>()
        };
        s.insert_token("t0", "h0", Role::Agent, "a1", t(1))
            .await
            .unwrap();
        s.insert_token("other", "ho", Role::Agent, "a2", t(1))
            .await
            .unwrap();
        s.insert_successor_token("t1", "h1", "a1", t(2))
            .await
            .unwrap();
        // A later join's token, not used yet (its answer still on its way).
        s.insert_successor_token("t2", "h2", "a1", t(3))
            .await
            .unwrap();
        let t1 = s.find_token_by_hash("h1", t(4)).await.unwrap().unwrap();
        assert!(t1.supersedes);
        // t1's first use: the older t0 goes, the newer unused t2 stays, a2's are not touched.
        assert_eq!(s.supersede_agent_tokens("t1", "a1").await.unwrap(), ["h0"]);
        assert_eq!(agent_tokens(s.list_tokens().await.unwrap()), ["t1", "t2"]);
        assert!(
            !s.find_token_by_hash("h1", t(4))
                .await
                .unwrap()
                .unwrap()
                .supersedes
        );
        // Used again (or by another manager at once): nothing more.
        assert!(s
            .supersede_agent_tokens("t1", "a1")
            .await
            .unwrap()
            .is_empty());
        assert_eq!(s.supersede_agent_tokens("t2", "a1").await.unwrap(), ["h1"]);
        assert_eq!(agent_tokens(s.list_tokens().await.unwrap()), ["t2"]);
        assert!(s.find_token_by_hash("ho", t(4)).await.unwrap().is_some());
    }
);

on_both!(what_ended_before_the_retention_is_forgotten, |db| {
    let s = &db.store;
    populate(
        s,
        "g",
        &[agent("old", "g", "cpu=1"), agent("live", "g", "cpu=1")],
        &[],
    )
    .await;
    // The old agent was terminated long ago; the live one is alive and as old.
    let mut old = s.get_agent("old").await.unwrap().unwrap();
    old.state = AgentState::Terminated;
    s.upsert_agent(&old, t(1)).await.unwrap();
    s.insert_token("t-old", "h-old", Role::Agent, "old", t(1))
        .await
        .unwrap();
    s.insert_token("t-live", "h-live", Role::Agent, "live", t(1))
        .await
        .unwrap();
    // Bootstrap tokens: one expired long ago, one used long ago, one still good.
    s.insert_bootstrap_token("b-expired", "hb1", "g", None, t(5), t(1))
        .await
        .unwrap();
    s.insert_bootstrap_token("b-used", "hb2", "g", None, t(500), t(1))
        .await
        .unwrap();
    s.consume_bootstrap_token("hb2", "x", t(2)).await.unwrap();
    s.insert_bootstrap_token("b-good", "hb3", "g", None, t(5000), t(1))
        .await
        .unwrap();
    // Two instances: one failed long ago, one still requested.
    let snap = s.snapshot("g", t(2)).await.unwrap();
    let launch = Decisions {
        launches: vec![Launch {
            template: "small".into(),
            count: 2,
            reason: "demand".into(),
        }],
        ..Default::default()
    };
    s.apply("g", &snap, &launch, t(2)).await.unwrap();
    let launched = s
        .list_instances("g", &InstancePhase::IN_FLIGHT)
        .await
        .unwrap();
    s.move_instance(
        &launched[0].id,
        &[InstancePhase::Requested],
        InstancePhase::Failed,
        None,
        "x",
        t(3),
    )
    .await
    .unwrap();

    let pruned = s.prune(t(100)).await.unwrap();
    assert_eq!(
        (pruned.agents, pruned.instances, pruned.tokens),
        (1, 1, 3),
        "the old agent and its token, the failed instance, two bootstrap tokens"
    );
    assert!(s.get_agent("old").await.unwrap().is_none());
    assert!(s.get_agent("live").await.unwrap().is_some(), "alive: kept");
    let tokens: Vec<String> = s
        .list_tokens()
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(tokens, ["b-good", "t-live"]);
    assert!(s.get_instance(&launched[1].id).await.unwrap().is_some());
    assert_eq!(s.prune(t(100)).await.unwrap(), Default::default());
});

on_both!(
    an_agent_removed_by_hand_is_remembered_until_it_joins_or_the_retention,
    |db| {
        let s = &db.store;
        populate(
            s,
            "g",
            &[
                agent("a1", "g", "cpu=8,mem=32GiB"),
                agent("a2", "g", "cpu=2"),
            ],
            &[],
        )
        .await;
        s.remove_agent("a1", true, true, t(10)).await.unwrap();
        s.remove_agent("a2", true, false, t(10)).await.unwrap();
        let removed = s.snapshot("g", t(11)).await.unwrap().removed;
        assert_eq!(removed.len(), 1, "a2 was forgotten: {removed:?}");
        assert_eq!(
            (removed[0].id.as_str(), removed[0].removed_at),
            ("a1", t(10))
        );
        assert_eq!(removed[0].capacity, "cpu=8,mem=32GiB".parse().unwrap());
        assert_eq!(s.removed_agents("g").await.unwrap(), removed);

        // Back: no longer awaited; removed again, then past the retention: forgotten.
        s.upsert_agent(&agent("a1", "g", "cpu=8,mem=32GiB"), t(20))
            .await
            .unwrap();
        assert!(s.removed_agents("g").await.unwrap().is_empty());
        s.remove_agent("a1", true, true, t(30)).await.unwrap();
        s.prune(t(30)).await.unwrap();
        assert_eq!(
            s.removed_agents("g").await.unwrap().len(),
            1,
            "removed at the cutoff: kept"
        );
        s.prune(t(31)).await.unwrap();
        assert!(s.removed_agents("g").await.unwrap().is_empty());
    }
);

on_both!(sessions_are_listed_newest_first_and_by_activity, |db| {
    let s = &db.store;
    populate(
        s,
        "g",
        &[],
        &[
            session("s1", "g", "ann", "cpu=1", 1),
            session("s2", "g", "ann", "cpu=1", 2),
            session("s3", "g", "ann", "cpu=1", 3),
        ],
    )
    .await;
    s.cancel_session("s2", t(4), "x").await.unwrap();
    let list = |filter: SessionFilter| async move { ids(&s.list_sessions(&filter).await.unwrap()) };
    let newest = SessionFilter {
        newest_first: true,
        ..Default::default()
    };
    assert_eq!(list(newest.clone()).await, ["s3", "s2", "s1"]);
    let after = SessionFilter {
        after_id: Some("s3".into()),
        limit: Some(1),
        ..newest.clone()
    };
    assert_eq!(list(after).await, ["s2"], "a page goes on to older ones");
    let active = SessionFilter {
        active: Some(true),
        ..newest.clone()
    };
    assert_eq!(list(active).await, ["s3", "s1"]);
    let ended = SessionFilter {
        active: Some(false),
        ..newest
    };
    assert_eq!(list(ended).await, ["s2"]);
});

on_both!(external_agents_keys_nonces_limit_and_revocation, |db| {
    use corral_api::agent_keys::AgentKey;
    let s = &db.store;
    s.create_group(&group("g"), t(1)).await.unwrap();
    let (k1, k2) = (
        AgentKey::generate().unwrap().public(),
        AgentKey::generate().unwrap().public(),
    );
    s.add_agent_key("g", "k1", &k1, t(2)).await.unwrap();
    // One name, one key per group; a group that is not there has none.
    for (name, key, why) in [
        ("k1", &k2, "has a key named"),
        ("k9", &k1, "registered already"),
    ] {
        let refused = s.add_agent_key("g", name, key, t(3)).await.unwrap_err();
        assert!(refused.to_string().contains(why), "{refused}");
    }
    assert!(matches!(
        s.add_agent_key("nope", "k", &k2, t(3)).await,
        Err(StoreError::NotFound { what: "group", .. })
    ));
    s.add_agent_key("g", "k2", &k2, t(3)).await.unwrap();
    assert_eq!(
        s.find_agent_key("g", &k2).await.unwrap().unwrap().name,
        "k2"
    );

    // A nonce joins once; used nonces are kept until they expire, then dropped.
    assert!(s.use_nonce("n1", t(100), t(10)).await.unwrap());
    assert!(s.use_nonce("n2", t(100), t(10)).await.unwrap());
    assert!(!s.use_nonce("n1", t(100), t(20)).await.unwrap(), "used");
    assert!(s.use_nonce("n3", t(300), t(100)).await.unwrap());
    assert!(
        s.use_nonce("n1", t(300), t(200)).await.unwrap(),
        "expired records were dropped (the manager refuses an expired nonce before)"
    );
    assert!(!s.use_nonce("n3", t(300), t(200)).await.unwrap(), "not yet");

    // The limit counts external agents taking part; the join that would pass it writes nothing.
    let joined = |id: &str| NewEvent {
        at: t(30),
        group: Some("g".into()),
        session: None,
        agent: Some(id.into()),
        kind: "joined".into(),
        message: format!("{id} joined"),
    };
    let external = |id: &str| Agent {
        external: true,
        ..agent(id, "g", "cpu=1")
    };
    for id in ["e1", "e2"] {
        let (agent, event) = (external(id), joined(id));
        let done = s.join_external_agent(&agent, "k1", 2, &event, t(30)).await;
        assert_eq!(done.unwrap(), Ok(()));
    }
    let (agent, event) = (external("e3"), joined("e3"));
    let full = s.join_external_agent(&agent, "k2", 2, &event, t(30)).await;
    assert_eq!(full.unwrap(), Err(2));
    assert!(s.get_agent("e3").await.unwrap().is_none());
    // Joining again does not count itself; one lost frees a place.
    let (agent, event) = (external("e2"), joined("e2"));
    let again = s.join_external_agent(&agent, "k1", 2, &event, t(31)).await;
    assert_eq!(again.unwrap(), Ok(()));
    s.set_agent_state("e2", AgentState::Lost, false, t(32))
        .await
        .unwrap();
    let (agent, event) = (external("e3"), joined("e3"));
    let freed = s.join_external_agent(&agent, "k2", 2, &event, t(33)).await;
    assert_eq!(freed.unwrap(), Ok(()));
    assert_eq!(s.agent_key_of("e3").await.unwrap().as_deref(), Some("k2"));
    let standing = s.external_standing("e2").await.unwrap().unwrap();
    assert_eq!(standing.key.as_deref(), Some("k1"));
    assert_eq!(s.external_agents_besides("g", "e2").await.unwrap(), 2);

    // Revoking k1 marks its agents taking part (e1), not the lost one nor k2's; once.
    let revoked = s.revoke_agent_key("g", "k1", t(40)).await.unwrap();
    assert_eq!(
        (revoked.revoked_at, revoked.agents.clone()),
        (Some(t(40)), vec!["e1".to_string()])
    );
    let e1 = s.get_agent("e1").await.unwrap().unwrap();
    assert_eq!((e1.state, e1.drained_by_hand), (AgentState::Marked, true));
    assert_eq!(
        s.get_agent("e3").await.unwrap().unwrap().state,
        AgentState::Alive
    );
    assert_eq!(
        s.get_agent("e2").await.unwrap().unwrap().state,
        AgentState::Lost
    );
    let again = s.revoke_agent_key("g", "k1", t(50)).await.unwrap();
    assert_eq!(again.revoked_at, Some(t(40)), "revoked once");
    let standing = s.external_standing("e1").await.unwrap().unwrap();
    assert_eq!(standing.key_revoked, Some(t(40)));
    // A revoked key is never registered again, under any name.
    let refused = s.add_agent_key("g", "k1b", &k1, t(60)).await.unwrap_err();
    assert!(refused.to_string().contains("revoked"), "{refused}");
    let keys = s.list_agent_keys("g").await.unwrap();
    let listed: Vec<(&str, Vec<String>)> = keys
        .iter()
        .map(|k| (k.name.as_str(), k.agents.clone()))
        .collect();
    assert_eq!(
        listed,
        [
            ("k1", vec!["e1".to_string(), "e2".to_string()]),
            ("k2", vec!["e3".to_string()])
        ]
    );
    assert_eq!(
        s.dismiss_external_agents("g", "off", t(70)).await.unwrap(),
        ["e1", "e3"]
    );
    assert!(s
        .external_standing("a-not-external")
        .await
        .unwrap()
        .is_none());
});

on_both!(agent_builds_and_updates_mark_and_end_once, |db| {
    use corral_api::agent_builds::AgentBuild;
    let s = &db.store;
    let build = |version: &str, sha256: &str| AgentBuild {
        version: version.into(),
        platform: "linux-x86_64".into(),
        sha256: sha256.into(),
        size: 7,
        uploaded_at: t(5),
    };
    // The same file again is a no-op; another file under the version is refused.
    s.put_agent_build(&build("2.0", "aa")).await.unwrap();
    s.put_agent_build(&build("2.0", "aa")).await.unwrap();
    let other = s.put_agent_build(&build("2.0", "bb")).await.unwrap_err();
    assert!(other.to_string().contains("held already"), "{other}");
    s.put_agent_build(&build("2.1", "aa")).await.unwrap();
    let listed = s.list_agent_builds().await.unwrap();
    assert_eq!(listed, [build("2.0", "aa"), build("2.1", "aa")]);
    // Its file is still another build's.
    let (gone, shared) = s.delete_agent_build("2.1", "linux-x86_64").await.unwrap();
    assert_eq!((gone.version.as_str(), shared), ("2.1", true));
    assert!(matches!(
        s.delete_agent_build("2.1", "linux-x86_64").await,
        Err(StoreError::NotFound { .. })
    ));

    s.create_group(&group("g"), t(1)).await.unwrap();
    let mut a1 = agent("a1", "g", "cpu=2");
    a1.version = Some("1.0".into());
    a1.platform = Some("linux-x86_64".into());
    s.upsert_agent(&a1, t(10)).await.unwrap();
    let standing = s.update_standing("a1").await.unwrap().unwrap();
    assert_eq!(standing.agent.version.as_deref(), Some("1.0"));
    assert_eq!((standing.policy.enabled, standing.failed), (false, None));
    let note = |kind: &str| NewEvent {
        at: t(20),
        group: Some("g".into()),
        session: None,
        agent: Some("a1".into()),
        kind: kind.into(),
        message: kind.into(),
    };
    let kinds = || async {
        let filter = EventFilter {
            agent: Some("a1".into()),
            ..Default::default()
        };
        let events = s.list_events(&filter).await.unwrap();
        events.into_iter().map(|e| e.kind).collect::<Vec<_>>()
    };

    // Busy, it is not marked; empty, it is, once.
    let mut busy = a1.clone();
    busy.allocated = slots("cpu=1");
    s.upsert_agent(&busy, t(11)).await.unwrap();
    assert!(!s
        .mark_for_update("a1", "2.0", &note("updating"))
        .await
        .unwrap());
    s.upsert_agent(&a1, t(12)).await.unwrap();
    assert!(s
        .mark_for_update("a1", "2.0", &note("updating"))
        .await
        .unwrap());
    assert!(!s
        .mark_for_update("a1", "2.0", &note("updating"))
        .await
        .unwrap());
    let marked = s.get_agent("a1").await.unwrap().unwrap();
    assert_eq!(
        (marked.state, marked.updating.as_deref()),
        (AgentState::Marked, Some("2.0"))
    );
    // It failed: unmarked, the target remembered, once.
    assert!(s
        .end_update("a1", "2.0", true, &note("update_failed"))
        .await
        .unwrap());
    assert!(!s
        .end_update("a1", "2.0", true, &note("update_failed"))
        .await
        .unwrap());
    let back = s.get_agent("a1").await.unwrap().unwrap();
    assert_eq!((back.state, back.updating), (AgentState::Alive, None));
    let standing = s.update_standing("a1").await.unwrap().unwrap();
    assert_eq!(standing.failed.as_deref(), Some("2.0"));
    // Drained by hand while it updated, it stays marked when the update ends.
    assert!(s
        .mark_for_update("a1", "2.1", &note("updating"))
        .await
        .unwrap());
    s.set_agent_state("a1", AgentState::Marked, true, t(30))
        .await
        .unwrap();
    // An end of another update than the one under way changes nothing.
    assert!(!s
        .end_update("a1", "2.0", false, &note("updated"))
        .await
        .unwrap());
    assert!(s
        .end_update("a1", "2.1", false, &note("updated"))
        .await
        .unwrap());
    let drained = s.get_agent("a1").await.unwrap().unwrap();
    assert_eq!(
        (drained.state, drained.drained_by_hand, drained.updating),
        (AgentState::Marked, true, None)
    );
    // A success leaves the last failure as it was.
    let standing = s.update_standing("a1").await.unwrap().unwrap();
    assert_eq!(standing.failed.as_deref(), Some("2.0"));
    assert_eq!(
        kinds().await,
        ["updated", "updating", "update_failed", "updating"]
    );
});

on_both!(agent_images_are_replaced_per_agent_and_go_with_it, |db| {
    use corral_api::images::HeldImage;
    let s = &db.store;
    let held = |image: &str, digest: char, offered: Option<char>| HeldImage {
        image: image.into(),
        digest: format!("sha256:{}", digest.to_string().repeat(64)),
        offered: offered.map(|o| format!("sha256:{}", o.to_string().repeat(64))),
    };
    s.create_group(&group("g"), t(1)).await.unwrap();
    for id in ["a1", "a2"] {
        s.upsert_agent(&agent(id, "g", "cpu=2"), t(2))
            .await
            .unwrap();
    }
    s.put_agent_images(
        "a1",
        &[held("r/x:1", 'a', None), held("r/y:1", 'b', None)],
        t(3),
    )
    .await
    .unwrap();
    s.put_agent_images("a2", &[held("r/x:1", 'a', None)], t(3))
        .await
        .unwrap();
    // A report replaces what the agent held: y is gone, x moved on.
    s.put_agent_images("a1", &[held("r/x:1", 'c', Some('c'))], t(4))
        .await
        .unwrap();
    let x = s.image_holdings("r/x:1").await.unwrap();
    let seen: Vec<(&str, &str, Option<&str>, Timestamp)> = x
        .iter()
        .map(|h| {
            (
                h.agent.as_str(),
                &h.digest[7..8],
                h.offered.as_deref().map(|o| &o[7..8]),
                h.reported_at,
            )
        })
        .collect();
    assert_eq!(
        seen,
        [("a1", "c", Some("c"), t(4)), ("a2", "a", None, t(3))]
    );
    assert!(x.iter().all(|h| h.group == "g"));
    assert!(s.image_holdings("r/y:1").await.unwrap().is_empty());
    let all: Vec<(String, String)> = s
        .list_image_holdings()
        .await
        .unwrap()
        .into_iter()
        .map(|(image, h)| (image, h.agent))
        .collect();
    assert_eq!(
        all,
        [("r/x:1".into(), "a1".into()), ("r/x:1".into(), "a2".into())]
    );
    // A removed agent holds nothing any more.
    s.remove_agent("a2", true, true, t(5)).await.unwrap();
    let x = s.image_holdings("r/x:1").await.unwrap();
    assert_eq!(
        x.iter().map(|h| h.agent.as_str()).collect::<Vec<_>>(),
        ["a1"]
    );
});

on_both!(
    heartbeats_are_written_many_at_once_and_never_go_back,
    |db| {
        let s = &db.store;
        // More agents than one statement writes.
        let agents: Vec<Agent> = (0..2500)
            .map(|i| agent(&format!("a{i}"), "g", "cpu=1"))
            .collect();
        populate(s, "g", &agents, &[session("s1", "g", "alice", "cpu=1", 1)]).await;
        let heard = s.heard_agent("a7").await.unwrap().unwrap();
        assert_eq!(
            (
                heard.state,
                heard.group.as_str(),
                heard.holds,
                heard.updating
            ),
            (AgentState::Alive, "g", false, false)
        );
        assert_eq!(s.heard_agent("nobody").await.unwrap(), None);
        let snap = s.snapshot("g", t(3)).await.unwrap();
        let placed = Decisions {
            placements: vec![place("s1", "a7", "cpu=1")],
            ..Default::default()
        };
        s.apply("g", &snap, &placed, t(3)).await.unwrap();
        assert!(s.heard_agent("a7").await.unwrap().unwrap().holds);
        assert!(!s.heard_agent("a8").await.unwrap().unwrap().holds);

        // Every agent but a0 heard at 50, and an unknown id passed over.
        let mut seen: Vec<(String, Timestamp)> =
            (1..2500).map(|i| (format!("a{i}"), t(50))).collect();
        seen.push(("nobody".into(), t(50)));
        s.touch_agents(&seen).await.unwrap();
        let silent = |before| async move {
            s.silent_agents(t(before))
                .await
                .unwrap()
                .into_iter()
                .map(|(a, _)| a)
                .collect::<Vec<_>>()
        };
        assert_eq!(silent(50).await, ["a0"]);
        assert_eq!(silent(51).await.len(), 2500);
        // An older time (a late batch) never takes one back.
        s.touch_agents(&[("a1".into(), t(20)), ("a0".into(), t(60))])
            .await
            .unwrap();
        assert_eq!(silent(51).await.len(), 2499, "a0 moved forward");
        assert!(!silent(51).await.contains(&"a0".to_string()));
        assert!(silent(51).await.contains(&"a1".to_string()), "a1 kept 50");
        assert!(
            !silent(50).await.contains(&"a1".to_string()),
            "a1 not back at 20"
        );
    }
);

on_both!(
    a_lost_agent_keeps_its_sessions_until_they_are_released_or_it_is_removed,
    |db| {
        let s = &db.store;
        populate(
            s,
            "g",
            &[agent("a1", "g", "cpu=4"), agent("a2", "g", "cpu=4")],
            &[
                session("s1", "g", "alice", "cpu=1", 1),
                session("s2", "g", "alice", "cpu=1", 2),
            ],
        )
        .await;
        let snap = s.snapshot("g", t(3)).await.unwrap();
        let placed = Decisions {
            placements: vec![place("s1", "a1", "cpu=1"), place("s2", "a2", "cpu=1")],
            ..Default::default()
        };
        s.apply("g", &snap, &placed, t(3)).await.unwrap();
        s.touch_agents(&[("a1".into(), t(10)), ("a2".into(), t(10))])
            .await
            .unwrap();

        // Lost: nothing new lands on it, and its session stays, holding what it held.
        assert_eq!(
            s.mark_agent_lost("a1", t(40), "stay with it")
                .await
                .unwrap(),
            Some(1)
        );
        assert_eq!(
            s.mark_agent_lost("a1", t(41), "stay with it")
                .await
                .unwrap(),
            None,
            "once"
        );
        let a1 = s.get_agent("a1").await.unwrap().unwrap();
        assert_eq!(a1.state, AgentState::Lost);
        assert_eq!(a1.allocated, slots("cpu=1"));
        let s1 = s.get_session("s1").await.unwrap().unwrap();
        assert_eq!(
            (s1.session.state, s1.session.agent.map(|a| a.0)),
            (SessionState::Scheduled, Some("a1".to_string()))
        );
        let lost = s
            .list_events(&EventFilter::default())
            .await
            .unwrap()
            .into_iter()
            .find(|e| e.kind == "lost")
            .unwrap();
        assert_eq!(
            lost.message,
            "agent a1 missed its heartbeats; 1 session(s) stay with it"
        );

        // Released only when not heard from since the cut-off, and lost.
        assert!(s.lost_agents_holding(t(10)).await.unwrap().is_empty());
        assert_eq!(
            s.lost_agents_holding(t(11)).await.unwrap(),
            vec![("a1".to_string(), "g".to_string())]
        );
        assert!(s
            .release_lost_agent("a1", t(10), true, t(50))
            .await
            .unwrap()
            .is_empty());
        assert_eq!(
            s.release_lost_agent("a1", t(11), true, t(50))
                .await
                .unwrap(),
            ["s1"]
        );
        let s1 = s.get_session("s1").await.unwrap().unwrap();
        assert_eq!(s1.session.state, SessionState::Pending);
        assert!(s1
            .history
            .last()
            .unwrap()
            .reason
            .contains("requeued: agent a1 was lost"));
        assert_eq!(
            s.get_agent("a1").await.unwrap().unwrap().allocated,
            Slots::new()
        );
        assert!(s.lost_agents_holding(t(11)).await.unwrap().is_empty());

        // A lost agent removed by hand takes what it still held with it: failed here.
        s.mark_agent_lost("a2", t(40), "stay with it")
            .await
            .unwrap();
        let removed = s.remove_agent("a2", false, true, t(60)).await.unwrap();
        assert_eq!(removed.released, ["s2"]);
        let s2 = s.get_session("s2").await.unwrap().unwrap();
        assert_eq!(s2.session.state, SessionState::Failed);
        assert_eq!(s2.end_reason.as_deref(), Some("agent a2 was lost"));
    }
);

on_both!(
    files_are_stored_whole_appended_once_and_read_from_an_offset,
    |db| {
        let s = &db.store;
        // A file larger than a row, stored whole and read back whole or from an offset.
        let big: Vec<u8> = (0..(3 << 20) + 17).map(|i| (i % 251) as u8).collect();
        s.put_file("sessions/s1", "outputs/a/big.bin", &big[..])
            .await
            .unwrap();
        let whole = s.read_file("sessions/s1", "outputs/a/big.bin", 0, u64::MAX);
        assert_eq!(whole.await.unwrap().as_deref(), Some(&big[..]));
        let middle = s
            .read_file("sessions/s1", "outputs/a/big.bin", (1 << 20) - 5, 10)
            .await
            .unwrap();
        assert_eq!(middle.as_deref(), Some(&big[(1 << 20) - 5..(1 << 20) + 5]));
        let third = (2 << 20) + 3;
        let late = s
            .read_file("sessions/s1", "outputs/a/big.bin", third as u64, 4)
            .await
            .unwrap();
        assert_eq!(late.as_deref(), Some(&big[third..third + 4]));
        let past = s.read_file("sessions/s1", "outputs/a/big.bin", 1 << 30, 10);
        assert_eq!(past.await.unwrap(), Some(Vec::new()));
        assert_eq!(
            s.read_file("sessions/s1", "outputs/none", 0, 10)
                .await
                .unwrap(),
            None
        );
        assert_eq!(
            s.read_file("sessions/s2", "outputs/a/big.bin", 0, 10)
                .await
                .unwrap(),
            None
        );

        // Stored again: the new file, not a mix; an empty file is there.
        s.put_file("sessions/s1", "outputs/a/big.bin", &b"small"[..])
            .await
            .unwrap();
        s.put_file("sessions/s1", "outputs/empty", &b""[..])
            .await
            .unwrap();
        s.put_file("sessions/s1", "inputs/x", &b"not an output"[..])
            .await
            .unwrap();
        assert_eq!(
            s.list_files("sessions/s1", "outputs/").await.unwrap(),
            vec![
                ("outputs/a/big.bin".to_string(), 5),
                ("outputs/empty".to_string(), 0)
            ]
        );
        assert_eq!(
            s.read_file("sessions/s1", "outputs/empty", 0, 10)
                .await
                .unwrap(),
            Some(Vec::new())
        );

        // A file where a directory of another is, or the reverse, is refused.
        for clashing in ["outputs/a", "outputs/a/big.bin/x", "outputs/empty/y"] {
            assert!(
                matches!(
                    s.put_file("sessions/s1", clashing, &b"x"[..]).await,
                    Err(StoreError::Conflict { .. })
                ),
                "{clashing}"
            );
        }
        assert_eq!(
            s.list_files("sessions/s1", "outputs/").await.unwrap().len(),
            2
        );

        // A log grows by appends at its size; one at another offset writes nothing and says the
        // size.
        use corral_store::Appended;
        let append = |offset: u64, data: &'static [u8]| {
            s.append_file("sessions/s1", "stdout.log", offset, data)
        };
        assert_eq!(append(0, b"one\n").await.unwrap(), Appended::Done);
        assert_eq!(append(4, b"two\n").await.unwrap(), Appended::Done);
        assert_eq!(append(4, b"two\n").await.unwrap(), Appended::Size(8));
        assert_eq!(append(12, b"four\n").await.unwrap(), Appended::Size(8));
        let log = s
            .read_file("sessions/s1", "stdout.log", 2, 100)
            .await
            .unwrap();
        assert_eq!(log.as_deref(), Some(&b"e\ntwo\n"[..]));

        // Scopes keep their files apart; a deleted file is gone.
        s.put_file("agent-builds", "ab12", &b"build"[..])
            .await
            .unwrap();
        let builds = s.list_files("agent-builds", "").await.unwrap();
        assert_eq!(builds, vec![("ab12".to_string(), 5)]);
        assert!(!s
            .list_files("sessions/s1", "")
            .await
            .unwrap()
            .iter()
            .any(|(name, _)| name == "ab12"));
        s.delete_file("sessions/s1", "stdout.log").await.unwrap();
        assert_eq!(
            s.read_file("sessions/s1", "stdout.log", 0, 1)
                .await
                .unwrap(),
            None
        );
        let build = s.read_file("agent-builds", "ab12", 0, 100).await.unwrap();
        assert_eq!(build.as_deref(), Some(&b"build"[..]));
    }
);

on_both!(of_uploads_of_one_file_at_once_one_is_kept_whole, |db| {
    let s = &db.store;
    // Lengths across row boundaries, each upload of its own byte: a file that mixes two
    // shows it.
    let uploads: Vec<Vec<u8>> = [3 << 20, (1 << 20) + 5, 17, (2 << 20) + 1, 5 << 20, 1]
        .iter()
        .enumerate()
        .map(|(i, &len)| vec![b'a' + i as u8; len])
        .collect();
    let mut puts = tokio::task::JoinSet::new();
    for data in uploads.clone() {
        let s = s.clone();
        puts.spawn(async move { s.put_file("sessions/s1", "out/model.bin", &data[..]).await });
    }
    while let Some(done) = puts.join_next().await {
        done.unwrap().unwrap();
    }
    let kept = s
        .read_file("sessions/s1", "out/model.bin", 0, 16 << 20)
        .await
        .unwrap()
        .unwrap();
    assert!(
        uploads.contains(&kept),
        "a file of {} bytes that is none of the uploads (starts with {:?}, ends with {:?})",
        kept.len(),
        kept.first().map(|&b| b as char),
        kept.last().map(|&b| b as char)
    );
});

on_both!(
    one_of_two_appends_at_the_same_offset_at_once_is_written,
    |db| {
        let s = &db.store;
        let mut appends = tokio::task::JoinSet::new();
        for i in 0..8 {
            let s = s.clone();
            appends.spawn(async move {
                let line = format!("writer {i}\n");
                s.append_file("sessions/s1", "stdout.log", 0, line.as_bytes())
                    .await
            });
        }
        let mut written = 0;
        while let Some(done) = appends.join_next().await {
            // Each is answered: written, or told the size another wrote.
            match done.unwrap().unwrap() {
                corral_store::Appended::Done => written += 1,
                corral_store::Appended::Size(size) => assert_eq!(size, 9),
            }
        }
        assert_eq!(written, 1);
        let log = s
            .read_file("sessions/s1", "stdout.log", 0, 100)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(log.len(), "writer 0\n".len());
    }
);
