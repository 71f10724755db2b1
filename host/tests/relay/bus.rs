//! The embedded bus: appends visible only on commit, in order per topic, positions per consumer.

use strand::bus::{EmbeddedBus, Message};
use strand::db::Database;
use strand_test_support::{on_every_backend, Backend};

on_every_backend!(appends_commit_with_their_transaction_and_replay_in_order);
on_every_backend!(a_long_append_over_several_topics_continues_each_in_order);

fn message(topic: &str, n: u32) -> Message {
    Message {
        topic: topic.into(),
        key: format!("acme:{n}"),
        headers: vec![("event-id".into(), format!("e{n}"))],
        payload: format!(r#"{{"n":{n}}}"#),
    }
}

async fn appends_commit_with_their_transaction_and_replay_in_order(backend: Backend) {
    let database = backend.fresh_database().await.unwrap();
    let db = Database::open(&database.url, 4).await.unwrap();
    let bus = EmbeddedBus::new(db.clone());

    let mut rolled_back = db.writer().begin().await.unwrap();
    bus.append(&mut rolled_back, &[message("a", 0)]).await.unwrap();
    rolled_back.rollback().await.unwrap();

    let mut tx = db.writer().begin().await.unwrap();
    bus.append(&mut tx, &[message("a", 1), message("b", 1), message("a", 2), message("a", 3)]).await.unwrap();
    tx.commit().await.unwrap();

    let all = bus.read("a", 0, 10).await.unwrap();
    let seen: Vec<_> = all.iter().map(|d| (d.seq, d.message.key.as_str())).collect();
    assert_eq!(seen, vec![(1, "acme:1"), (2, "acme:2"), (3, "acme:3")], "nothing from the rolled-back append");
    assert_eq!(all[0].message, message("a", 1));
    assert_eq!(all[0].message.header("event-id"), Some("e1"));
    assert_eq!(bus.read("b", 0, 10).await.unwrap().len(), 1);
    assert_eq!(bus.read("a", 2, 10).await.unwrap().iter().map(|d| d.seq).collect::<Vec<_>>(), vec![3]);

    assert_eq!(bus.position("counts", "a").await.unwrap(), 0);
    bus.commit("counts", "a", 2).await.unwrap();
    bus.commit("counts", "a", 3).await.unwrap();
    assert_eq!(bus.position("counts", "a").await.unwrap(), 3);
    assert_eq!(bus.position("lists", "a").await.unwrap(), 0, "positions are per consumer");
}

/// One append of more messages than one insert carries, topics interleaved: each topic continues from its
/// end, every message once, in the order given.
async fn a_long_append_over_several_topics_continues_each_in_order(backend: Backend) {
    let database = backend.fresh_database().await.unwrap();
    let db = Database::open(&database.url, 4).await.unwrap();
    let bus = EmbeddedBus::new(db.clone());
    bus.append_alone(&[message("a", 0)]).await.unwrap();

    let interleaved: Vec<Message> = (1..=600).map(|n| message(if n % 3 == 0 { "b" } else { "a" }, n)).collect();
    bus.append_alone(&interleaved).await.unwrap();

    let a = bus.read("a", 0, 1000).await.unwrap();
    assert_eq!(a.iter().map(|d| d.seq).collect::<Vec<_>>(), (1..=401).collect::<Vec<i64>>());
    let expected_a: Vec<String> = (0..=600).filter(|n| n % 3 != 0 || *n == 0).map(|n| format!("acme:{n}")).collect();
    assert_eq!(a.iter().map(|d| d.message.key.clone()).collect::<Vec<_>>(), expected_a);
    let b = bus.read("b", 0, 1000).await.unwrap();
    assert_eq!(b.iter().map(|d| d.seq).collect::<Vec<_>>(), (1..=200).collect::<Vec<i64>>());
    assert_eq!(b.last().unwrap().message, message("b", 600));
}
