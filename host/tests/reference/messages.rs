//! `docs/reference/messages.md`: what a consumer of Strand's topics receives — the topic, the key, the
//! host's headers (`bus::Header`) and the value's fields (`outbox::ChangeEvent`) with their doc comments, the
//! event types (`outbox::EventType`), and one message of each type exactly as the relay builds it: the
//! conformance samples routed by the bundled router, turned into messages by `relay::to_messages`.

use std::collections::BTreeSet;

use strand::bus::Topology;
use strand::plugins::{sample_outbox_events, sample_tenant, PluginKind, PluginRuntime, BUNDLED};
use strand::relay::to_messages;

use crate::source_docs::{cell, field, items, spelled_variant, Documented, Group};
use crate::{check, repository, GENERATED};

fn documented(path: &str, opening: &str, name_of: fn(&str) -> Option<String>) -> Vec<Documented> {
    items(&std::fs::read_to_string(repository().join(path)).unwrap(), opening, Group::Apart, name_of)
}

/// A table of `items`, one row each.
fn table(heading: &str, items: &[Documented]) -> String {
    let mut table = format!("| {heading} | what it says |\n|---|---|\n");
    for item in items {
        table.push_str(&format!("| `{}` | {} |\n", item.names[0], cell(&item.doc)));
    }
    table
}

#[tokio::test]
async fn the_message_reference_is_what_the_relay_publishes() {
    let headers = documented("host/src/bus/mod.rs", "pub enum Header(", spelled_variant);
    let fields = documented("host/src/outbox/mod.rs", "pub struct ChangeEvent {", field);
    let types = documented("host/src/outbox/mod.rs", "pub enum EventType(", spelled_variant);
    for item in headers.iter().chain(&fields).chain(&types) {
        assert!(!item.doc.is_empty(), "{} has no doc comment: a consumer reads it here", item.names[0]);
    }
    let mut page = format!("# Messages on the bus\n\n{GENERATED}");
    page.push_str(
        "Every committed change of a relation is one message on `{topic_prefix}following` (the events topic; \
         the bundled router's only destination, and the one the projections read), keyed `tenant:from` so one \
         user's changes keep their order; a tenant's router may add copies on topics of its own namespace \
         (`{topic_prefix}tenant.{tenant}.{topic}`), with its own key and headers. Delivery is at least once: \
         deduplicate by `event-id` (one change forever), or keep the highest `version` per edge. The embedded \
         bus carries the same messages.\n\n## Headers\n\nSet by the host on every message (a router's headers \
         never take these names):\n\n",
    );
    page.push_str(&table("header", &headers));
    page.push_str("\n## Value\n\nJSON (UTF-8), one object:\n\n");
    page.push_str(&table("field", &fields));
    page.push_str("\n## Event types (`type`)\n\n");
    page.push_str(&table("type", &types));

    let runtime = PluginRuntime::new(Default::default(), None).unwrap();
    let router = BUNDLED.iter().find(|p| p.kind == PluginKind::Router).unwrap();
    let router = runtime.prepare(PluginKind::Router, router.wasm).unwrap();
    let rows = sample_outbox_events(&sample_tenant());
    let (routed, _) = runtime.route(&router, runtime.limits(), &rows).await.result.unwrap();
    let topology = Topology::new("strand.");
    page.push_str("\n## One message of each type\n\nAs the relay publishes them with the default `topic_prefix` ");
    page.push_str("and the bundled router (version 0):\n\n");
    let mut shown = BTreeSet::new();
    for (row, destinations) in rows.iter().zip(&routed) {
        if !shown.insert(row.event_type.to_string()) {
            continue;
        }
        for message in to_messages(row, destinations, 0, &topology, None) {
            let headers: Vec<String> = message.headers.iter().map(|(name, value)| format!("{name}: {value}")).collect();
            page.push_str(&format!(
                "```text\ntopic: {}\nkey: {}\n{}\n\n{}\n```\n\n",
                message.topic,
                message.key,
                headers.join("\n"),
                message.payload
            ));
        }
    }
    assert_eq!(shown.len(), types.len(), "a sample of every event type");
    check("messages.md", &page);
}
