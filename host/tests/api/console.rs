//! The admin API behind the console: a user's relations for support staff (read for the user, without
//! the user's token), the audit log's filters (with a bounded read), and each tenant's figures.

use reqwest::Method;
use serde_json::{json, Value};
use strand::tenancy::audit::{self, AuditAction, AuditOutcome, AuditRecord};
use strand_test_support::{on_every_backend, wait_until, Backend, TestServer};

on_every_backend!(
    support_staff_read_a_users_relations_and_latest_changes,
    the_audit_log_filters_by_actor_action_and_time,
    a_rare_audit_filter_pages_through_the_log_a_bounded_read_at_a_time
);

async fn support_staff_read_a_users_relations_and_latest_changes(backend: Backend) {
    let server = TestServer::start(backend).await;
    let (one, three, six) = (server.client("acme", 1), server.client("acme", 3), server.client("acme", 6));
    assert_eq!(six.send_json(Method::PUT, "/v1/me/settings", &json!({"private": true})).await.status, 200);
    one.follow(2).await;
    one.follow(3).await;
    three.follow(1).await;
    one.unfollow(3).await;
    assert_eq!(one.put("/v1/me/blocks/4").await.status, 200);
    assert_eq!(one.put("/v1/me/mutes/5").await.status, 200);
    assert_eq!(one.put("/v1/me/following/6").await.status, 200, "a request to a private account");

    let user = "/admin/v1/tenants/acme/accounts/1/relations";
    let looked_up = server.admin().get(&format!("{user}?with=3")).await;
    assert_eq!(looked_up.status, 200, "{looked_up:?}");
    let body = looked_up.body;
    assert_eq!((body["state"].clone(), body["private"].clone()), (json!("active"), json!(false)));
    let served = one.get("/v1/users/1/counts").await.body;
    assert_eq!(body["counts"], served, "the counts the API serves");
    assert_eq!((served["followings"].as_i64(), served["followers"].as_i64()), (Some(1), Some(1)));
    let relationship = &body["relationship"];
    assert_eq!((relationship["following"].clone(), relationship["followed_by"].clone()), (json!(false), json!(true)));
    // The latest changes, newest first: the ended follow, the block, the mute and the request among them.
    let recent = body["recent"].as_array().unwrap();
    let changes: Vec<(String, i64, i64, String)> = recent
        .iter()
        .map(|c| {
            let text = |field: &str| c[field].as_str().unwrap().to_owned();
            (text("relation"), c["from"].as_i64().unwrap(), c["to"].as_i64().unwrap(), text("state"))
        })
        .collect();
    for (relation, from, to, state) in
        [("follow", 1, 6, "requested"), ("mute", 1, 5, "active"), ("block", 1, 4, "active"), ("follow", 1, 3, "ended")]
    {
        let change = (relation.to_owned(), from, to, state.to_owned());
        assert!(changes.contains(&change), "{change:?} in {changes:?}");
    }
    let times: Vec<&str> = recent.iter().map(|c| c["at"].as_str().unwrap()).collect();
    assert!(times.windows(2).all(|pair| pair[0] >= pair[1]), "newest first: {times:?}");
    assert_eq!(server.admin().get(&format!("{user}?with=x")).await.code(), "invalid_user_id");

    let listed = |list: &'static str| {
        let admin = server.admin();
        async move {
            let page = admin.get(&format!("{user}/{list}")).await;
            assert_eq!(page.status, 200, "{list}: {page:?}");
            page.body["items"].as_array().unwrap().iter().map(|i| i["user_id"].as_i64().unwrap()).collect::<Vec<_>>()
        }
    };
    assert_eq!(listed("following").await, [2]);
    assert_eq!(listed("followers").await, [3]);
    assert_eq!(listed("blocks").await, [4]);
    assert_eq!(listed("mutes").await, [5]);
    assert_eq!(listed("outgoing_requests").await, [6]);
    assert_eq!(listed("requests").await, Vec::<i64>::new());
    let six_requests = server.admin().get("/admin/v1/tenants/acme/accounts/6/relations/requests").await.body;
    assert_eq!(six_requests["items"][0]["user_id"], 1);
    let unknown = server.admin().get(&format!("{user}/friends")).await;
    assert_eq!((unknown.status, unknown.code()), (400, "invalid_path"));
    let paged = server.admin().get(&format!("{user}/following?limit=0")).await;
    assert_eq!(paged.code(), "invalid_limit");
}

async fn the_audit_log_filters_by_actor_action_and_time(backend: Backend) {
    let server = TestServer::start(backend).await;
    let key = server.admin().send_json(Method::POST, "/admin/v1/tenants/acme/keys", &json!({"name": "team"})).await;
    let team = server.client_with_token(key.body["secret"].as_str().unwrap());
    let settings = json!({"rate_limit_failure": "closed"});
    assert_eq!(team.send_json(Method::PUT, "/admin/v1/tenants/acme/settings", &settings).await.status, 200);
    assert_eq!(server.admin().send_json(Method::PUT, "/admin/v1/tenants/acme/settings", &settings).await.status, 200);

    let entries = |query: &str| {
        let admin = server.admin();
        let path = format!("/admin/v1/audit?tenant=acme&{query}");
        async move {
            let page = admin.get(&path).await;
            assert_eq!(page.status, 200, "{path}: {page:?}");
            let entries = page.body["entries"].as_array().unwrap().clone();
            entries
                .iter()
                .map(|e| (e["actor"].as_str().unwrap().to_owned(), e["action"].as_str().unwrap().to_owned()))
                .collect::<Vec<_>>()
        }
    };
    let owned = |pairs: &[(&str, &str)]| pairs.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect::<Vec<_>>();
    assert_eq!(
        entries("").await,
        owned(&[("admin", "set_settings"), ("key:team", "set_settings"), ("admin", "create_key")])
    );
    assert_eq!(entries("actor=key:team").await, owned(&[("key:team", "set_settings")]));
    assert_eq!(entries("action=create_key").await, owned(&[("admin", "create_key")]));
    assert_eq!(entries("since=2999-01-01T00:00:00Z").await, owned(&[]));
    assert_eq!(entries("until=2000-01-01T00:00:00Z").await, owned(&[]));
    assert_eq!(entries("since=2000-01-01T00:00:00Z&until=2999-01-01T00:00:00Z&actor=admin").await.len(), 2);
    // One entry per page: the next page goes on after it, and the last says there is no more.
    let first = server.admin().get("/admin/v1/audit?tenant=acme&actor=admin&limit=1").await.body;
    let before = first["next_before"].as_i64().expect("more after the first");
    let second =
        server.admin().get(&format!("/admin/v1/audit?tenant=acme&actor=admin&limit=1&before={before}")).await.body;
    assert_eq!(second["entries"][0]["action"], "create_key");
    assert_eq!(second["next_before"], Value::Null, "nothing older");
    for bad in ["action=dance", "since=yesterday"] {
        let refused = server.admin().get(&format!("/admin/v1/audit?{bad}")).await;
        assert_eq!((refused.status, refused.code()), (400, "invalid_query"), "{bad}: {refused:?}");
    }
}

#[tokio::test]
async fn the_tenants_list_carries_each_tenants_writes_per_second() {
    let server = TestServer::start(Backend::Sqlite).await;
    let writer = tokio::spawn({
        let clients: Vec<_> = (1..=2_000).map(|user| server.client("figures", user)).collect();
        async move {
            for client in clients {
                client.put("/v1/me/following/1").await;
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        }
    });
    let figure =
        |list: &Value| list["figures"].as_array().and_then(|f| f.iter().find(|f| f["tenant"] == "figures").cloned());
    wait_until("the tenant's writes per second are listed", std::time::Duration::from_secs(40), || async {
        let listed = server.admin().get("/admin/v1/tenants").await.body;
        figure(&listed).is_some_and(|f| f["writes_per_second"].as_f64().is_some_and(|rate| rate > 0.0))
    })
    .await;
    writer.abort();
    let listed = server.admin().get("/admin/v1/tenants").await.body;
    let figures = figure(&listed).unwrap();
    assert_eq!((figures["parked_rows"].clone(), figures["parked_events"].clone()), (json!(0), json!(0)));
    assert_eq!(figures["quota_use"], Value::Null, "no deployed projector, no quota in use");
    let own = server.admin().get("/admin/v1/tenants/figures/figures").await;
    assert_eq!((own.status, own.body["tenant"].clone()), (200, json!("figures")));
}

/// A filter that matches one entry among thousands answers short pages, each looking at a bounded number
/// of entries, with where to go on: the entry is found, none is seen twice.
async fn a_rare_audit_filter_pages_through_the_log_a_bounded_read_at_a_time(backend: Backend) {
    let server = TestServer::start(backend).await;
    let entry = |actor: &str| AuditRecord {
        actor: actor.to_owned(),
        tenant: "acme".to_owned(),
        action: AuditAction::Deploy,
        slot: None,
        version: None,
        sha256: None,
        outcome: AuditOutcome::Ok,
        detail: String::new(),
    };
    audit::record(server.database(), entry("key:rare")).await.unwrap();
    for _ in 0..6_000 {
        audit::record(server.database(), entry("host")).await.unwrap();
    }
    let (mut before, mut pages, mut found) = (None::<i64>, 0, Vec::new());
    loop {
        let after = before.map(|b| format!("&before={b}")).unwrap_or_default();
        let page = server.admin().get(&format!("/admin/v1/audit?tenant=acme&actor=key:rare&limit=10{after}")).await;
        assert_eq!(page.status, 200, "{page:?}");
        pages += 1;
        found.extend(page.body["entries"].as_array().unwrap().iter().map(|e| e["actor"].clone()));
        match page.body["next_before"].as_i64() {
            Some(next) => before = Some(next),
            None => break,
        }
        assert!(pages < 5, "6 001 entries take two bounded reads, not {pages}");
    }
    assert_eq!(found, [json!("key:rare")]);
    assert_eq!(pages, 2, "the first page looked at 5 000 entries and found none; the second found it");
}
