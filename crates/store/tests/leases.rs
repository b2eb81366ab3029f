//! Groups' leases between managers, fenced writes and launches claimed before they are made,
//! on SQLite and (with CORRAL_TEST_DATABASE_URL) PostgreSQL.

mod common;

use corral_core::*;
use corral_store::{Fence, InstancePhase, StoreError};

use common::*;

fn launch(count: u32) -> Decisions {
    Decisions {
        launches: vec![Launch {
            template: "small".into(),
            count,
            reason: "demand".into(),
        }],
        ..Default::default()
    }
}

on_both!(
    a_lease_goes_to_one_manager_until_it_expires_or_is_let_go,
    |db| {
        let s = &db.store;
        s.create_group(&group("g"), t(1)).await.unwrap();
        assert_eq!(
            s.take_lease("nope", "a", t(1000), t(6000), false)
                .await
                .unwrap(),
            None,
            "no lease for a group that does not exist"
        );

        let a = s
            .take_lease("g", "a", t(1000), t(6000), false)
            .await
            .unwrap();
        assert_eq!(
            a.as_ref().map(|l| (l.owner.as_str(), l.epoch)),
            Some(("a", 1))
        );
        assert_eq!(
            s.take_lease("g", "b", t(2000), t(7000), false)
                .await
                .unwrap(),
            None,
            "held until it expires"
        );
        let renewed = s.renew_leases("a", t(9000)).await.unwrap();
        assert_eq!(renewed.len(), 1);
        assert_eq!(renewed[0].expires_at, t(9000));
        assert_eq!(
            s.take_lease("g", "b", t(8999), t(14000), false)
                .await
                .unwrap(),
            None,
            "the renewal counts"
        );

        // Expired: taken over with the next epoch; the old holder renews nothing.
        let b = s
            .take_lease("g", "b", t(9000), t(14000), false)
            .await
            .unwrap();
        assert_eq!(b.map(|l| (l.owner, l.epoch)), Some(("b".to_string(), 2)));
        assert!(s.renew_leases("a", t(15000)).await.unwrap().is_empty());

        // Let go: taken at once; forced: taken whoever holds it.
        s.release_lease("g", "b").await.unwrap();
        let c = s
            .take_lease("g", "c", t(10000), t(15000), false)
            .await
            .unwrap();
        assert_eq!(c.map(|l| l.epoch), Some(3));
        let d = s
            .take_lease("g", "d", t(10001), t(15000), true)
            .await
            .unwrap();
        assert_eq!(d.map(|l| l.epoch), Some(4));

        // The lease goes with its group.
        s.delete_group("g").await.unwrap();
        assert!(s.list_leases().await.unwrap().is_empty());
    }
);

on_both!(
    a_fenced_store_writes_nothing_once_the_lease_moved_on,
    |db| {
        let s = &db.store;
        populate_group(s).await;
        let lease = s
            .take_lease("g", "a", t(1000), t(6000), false)
            .await
            .unwrap()
            .unwrap();
        let fenced = s.fenced(Fence::from(&lease));
        let snap = fenced.snapshot("g", t(1500)).await.unwrap();
        fenced.apply("g", &snap, &launch(2), t(1500)).await.unwrap();
        let requested = s
            .list_instances("g", &[InstancePhase::Requested])
            .await
            .unwrap();
        assert_eq!(requested.len(), 2, "the holder writes");

        s.take_lease("g", "b", t(7000), t(12000), false)
            .await
            .unwrap()
            .unwrap();
        let snap = fenced.snapshot("g", t(7100)).await.unwrap();
        let refused = fenced.apply("g", &snap, &launch(1), t(7100)).await;
        assert!(
            matches!(&refused, Err(StoreError::Fenced { group, epoch: 1 }) if group == "g"),
            "{refused:?}"
        );
        let ids: Vec<&str> = requested.iter().map(|r| r.id.as_str()).collect();
        assert!(matches!(
            fenced.claim_launches(&ids, t(7200)).await,
            Err(StoreError::Fenced { .. })
        ));
        assert!(matches!(
            fenced.record_provider_id(ids[0], "i-1").await,
            Err(StoreError::Fenced { .. })
        ));
        let after = s.list_instances("g", &InstancePhase::ALL).await.unwrap();
        assert!(
            after.len() == 2
                && after
                    .iter()
                    .all(|r| r.phase == InstancePhase::Requested && r.provider_id.is_none()),
            "nothing written after the lease moved on: {after:?}"
        );
    }
);

on_both!(each_requested_instance_is_claimed_once, |db| {
    let s = &db.store;
    populate_group(s).await;
    let snap = s.snapshot("g", t(100)).await.unwrap();
    s.apply("g", &snap, &launch(3), t(100)).await.unwrap();
    let rows = s
        .list_instances("g", &[InstancePhase::Requested])
        .await
        .unwrap();
    let ids: Vec<&str> = rows.iter().map(|r| r.id.as_str()).collect();
    let first = s.claim_launches(&ids[..2], t(200)).await.unwrap();
    assert_eq!(first, ids[..2]);
    // A second driver reading the same rows claims only the one left.
    let second = s.claim_launches(&ids, t(201)).await.unwrap();
    assert_eq!(second, ids[2..]);
    let launching = s
        .list_instances("g", &[InstancePhase::Launching])
        .await
        .unwrap();
    assert_eq!(launching.len(), 3);
    assert!(launching.iter().all(|r| r.updated_at >= t(200)));
    // Claimed instances are still capacity on its way.
    assert_eq!(
        s.list_instances("g", &InstancePhase::IN_FLIGHT)
            .await
            .unwrap()
            .len(),
        3
    );
});

async fn populate_group(s: &corral_store::Store) {
    s.create_group(&group("g"), t(1)).await.unwrap();
    s.upsert_agent(&agent("a1", "g", "cpu=4"), t(1))
        .await
        .unwrap();
}

on_both!(a_groups_governor_is_kept_for_its_next_owner, |db| {
    let s = &db.store;
    populate_group(s).await;
    assert_eq!(s.governor("g").await.unwrap(), Governor::default());
    let lease = s
        .take_lease("g", "a", t(1000), t(6000), false)
        .await
        .unwrap()
        .unwrap();
    let fenced = s.fenced(Fence::from(&lease));
    let settings = LaunchSettings::default();
    let mut governor = Governor::default();
    governor.launched(&settings, "small", 2, t(1000));
    governor.failed(&settings, "small", false, "quota exceeded", t(1100));
    fenced.put_governor("g", &governor, t(1100)).await.unwrap();
    let kept = s.governor("g").await.unwrap();
    assert_eq!(kept, governor);
    assert_eq!(
        kept.limits(&settings, t(1200))["small"].allowed,
        0,
        "still backing off"
    );

    // The next owner goes on from it; the old one can no longer change it.
    s.take_lease("g", "b", t(7000), t(12000), false)
        .await
        .unwrap()
        .unwrap();
    assert!(matches!(
        fenced
            .put_governor("g", &Governor::default(), t(7100))
            .await,
        Err(StoreError::Fenced { .. })
    ));
    assert_eq!(s.governor("g").await.unwrap(), governor);
});

/// A manager paused in the middle of a fenced write holds its group's lease row locked: the
/// next manager's takeover does not wait on it (the round passes it by), and once the server
/// ends the paused session for idling in its transaction, the lease is taken. PostgreSQL only:
/// SQLite has one manager.
#[tokio::test]
async fn a_paused_holders_locked_lease_is_passed_by_then_taken_once_its_session_ends() {
    use sqlx::{Connection, Executor};
    let Some(db) = common::Db::postgres("paused_holders_locked_lease").await else {
        return;
    };
    let s = &db.store;
    s.create_group(&group("g"), t(1)).await.unwrap();
    s.take_lease("g", "a", t(1000), t(6000), false)
        .await
        .unwrap()
        .unwrap();
    // Manager a's connection, with the idle limit its store sets (`Store::open_with`): its
    // fence check locks the row, and then it is paused (nothing more is sent).
    let idle = std::time::Duration::from_millis(1500);
    let mut paused = sqlx::AnyConnection::connect(&db.url).await.unwrap();
    paused
        .execute("SET idle_in_transaction_session_timeout = 1500")
        .await
        .unwrap();
    paused.execute("BEGIN").await.unwrap();
    paused
        .execute("UPDATE group_leases SET epoch = epoch WHERE group_name = 'g'")
        .await
        .unwrap();

    // Expired, but locked: passed by at once rather than waited for.
    let asked = std::time::Instant::now();
    assert_eq!(
        s.take_lease("g", "b", t(7000), t(12000), false)
            .await
            .unwrap(),
        None
    );
    assert!(
        asked.elapsed() < idle,
        "waited {:?} on the locked row",
        asked.elapsed()
    );
    // The server ends the paused session; the next round takes the lease.
    let taken = corral_testkit::eventually_async(
        "the lease taken once the paused session ends",
        std::time::Duration::from_secs(10),
        || async {
            s.take_lease("g", "b", t(7000), t(12000), false)
                .await
                .unwrap()
        },
    )
    .await;
    assert_eq!((taken.owner.as_str(), taken.epoch), ("b", 2));
    // The paused manager, resumed, finds its transaction gone: nothing it wrote stays.
    assert!(paused.execute("COMMIT").await.is_err());
}

on_both!(leases_are_judged_by_the_databases_clock, |db| {
    let local = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    // SQLite has one manager: its own clock. PostgreSQL answers with its own (here, on the same
    // host, the same time), whatever the caller's says.
    let skewed = Timestamp(local - 3_600_000);
    let clock = db.store.clock(skewed).await.unwrap();
    match db.store.backend() {
        corral_store::Backend::Sqlite => assert_eq!(clock, skewed),
        corral_store::Backend::Postgres => {
            assert!((clock.0 - local).abs() < 5_000, "{} vs {local}", clock.0)
        }
    }
});
