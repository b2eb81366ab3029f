//! Changing Slurm's configuration at run time: draining and resuming the node, closing and
//! opening the partition. A test binary of its own, so that no other test's job waits on the
//! drained node meanwhile (test binaries run one after another).

use std::time::Duration;

use corral_batch::slurm::Slurm;
use corral_batch::{BatchError, BatchSystem, Commands, ConfigChange, NodeState, QueueState};

async fn node_state(slurm: &Slurm, want: &[NodeState]) -> corral_batch::Node {
    corral_testkit::eventually_async(
        &format!("the node to be {want:?}"),
        Duration::from_secs(30),
        || async {
            let nodes = slurm.nodes().await.map_err(|e| e.to_string())?;
            let node = nodes.into_iter().find(|n| n.name == "localhost");
            match node {
                Some(n) if want.contains(&n.state) => Ok(n),
                other => Err(format!("{other:?}")),
            }
        },
    )
    .await
}

#[tokio::test]
async fn the_node_is_drained_and_resumed_and_the_partition_closed_and_opened() {
    let connected = Slurm::connect(Commands::default()).await;
    let Some(slurm) = corral_testkit::require_ok("Slurm (.ci/slurm.sh)", connected) else {
        return;
    };
    slurm
        .apply(&ConfigChange::DrainNode {
            node: "localhost".into(),
            reason: "corral test: maintenance".into(),
        })
        .await
        .unwrap();
    let node = node_state(&slurm, &[NodeState::Drained, NodeState::Draining]).await;
    assert_eq!(node.reason.as_deref(), Some("corral test: maintenance"));
    assert!(node.native_state.contains("DRAIN"), "{node:?}");
    slurm
        .apply(&ConfigChange::ResumeNode {
            node: "localhost".into(),
        })
        .await
        .unwrap();
    node_state(
        &slurm,
        &[NodeState::Idle, NodeState::Mixed, NodeState::Allocated],
    )
    .await;

    let queue = |state| ConfigChange::QueueState {
        queue: "debug".into(),
        state,
    };
    slurm.apply(&queue(QueueState::Down)).await.unwrap();
    let config = slurm.config().await.unwrap();
    assert_eq!(config.queues[0].state, "down");
    slurm.apply(&queue(QueueState::Up)).await.unwrap();
    let config = slurm.config().await.unwrap();
    assert_eq!(config.queues[0].state, "up");

    let e = slurm
        .apply(&ConfigChange::ResumeNode {
            node: "no-such-node".into(),
        })
        .await
        .unwrap_err();
    assert!(matches!(e, BatchError::Refused { .. }), "{e}");
    let e = slurm
        .apply(&ConfigChange::ResumeNode { node: "a b".into() })
        .await
        .unwrap_err();
    assert!(matches!(e, BatchError::InvalidSpec { .. }), "{e}");
}
