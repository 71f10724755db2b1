//! One follow, one trace, across every process: an API node, a binlog relay and the workers, each its own
//! process, export to an OTLP/HTTP receiver the test runs; the follow's spans arrive under one trace id,
//! each process's continuing the one before (the outbox row's and the Kafka message's `traceparent`), with
//! the plugin calls of each inside.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message as _;
use strand_test_support::{token, TEST_SECRET};

use super::{answering, port, Deployment};

/// A span as the receiver got it.
#[derive(Debug, Clone)]
struct Received {
    service: String,
    name: String,
    trace: String,
    id: String,
    parent: String,
}

type Spans = Arc<Mutex<Vec<Received>>>;

/// An OTLP/HTTP (protobuf) trace receiver on a free port: every span sent to `/v1/traces`.
async fn receiver() -> (u16, Spans) {
    let spans = Spans::default();
    let app = axum::Router::new().route("/v1/traces", axum::routing::post(receive)).with_state(spans.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (port, spans)
}

async fn receive(State(spans): State<Spans>, body: Bytes) -> axum::http::StatusCode {
    let Ok(request) = ExportTraceServiceRequest::decode(body) else { return axum::http::StatusCode::BAD_REQUEST };
    let mut spans = spans.lock().unwrap();
    for resource in request.resource_spans {
        let service = resource
            .resource
            .iter()
            .flat_map(|r| &r.attributes)
            .find(|a| a.key == "service.name")
            .and_then(|a| match a.value.as_ref()?.value.as_ref()? {
                AnyValue::StringValue(name) => Some(name.clone()),
                _ => None,
            })
            .unwrap_or_default();
        for span in resource.scope_spans.into_iter().flat_map(|s| s.spans) {
            spans.push(Received {
                service: service.clone(),
                name: span.name,
                trace: hex::encode(span.trace_id),
                id: hex::encode(span.span_id),
                parent: hex::encode(span.parent_span_id),
            });
        }
    }
    axum::http::StatusCode::OK
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_follow_is_one_trace_from_the_api_through_the_relay_and_kafka_to_the_worker() {
    let (collector, spans) = receiver().await;
    let mut deployment = Deployment::new().await;
    deployment.set("tracing_otlp_endpoint", format!("http://127.0.0.1:{collector}"));
    deployment.set("tracing_sample_ratio", 1);
    let (api_port, relay_port, worker_port) = (port(), port(), port());
    let api = deployment.api("api", api_port);
    let relay = deployment.relay("relay", relay_port);
    let worker = deployment.worker("worker", worker_port, None);
    for (p, process) in [(api_port, &api), (relay_port, &relay), (worker_port, &worker)] {
        answering(p, process).await;
    }

    let reply = reqwest::Client::new()
        .put(format!("http://127.0.0.1:{api_port}/v1/me/following/2"))
        .bearer_auth(token(TEST_SECRET, "1", "traced", 3600))
        .send()
        .await
        .unwrap();
    assert_eq!(reply.status(), 200);

    // The follow's trace: the one its HTTP request began, named by its method and route as OTel's HTTP
    // conventions ask.
    const REQUEST: &str = "PUT /v1/me/following/{user_id}";
    let trace = || {
        let spans = spans.lock().unwrap();
        let request = spans.iter().find(|s| s.name == REQUEST && s.service == "strand-serve")?;
        let of_trace: Vec<Received> = spans.iter().filter(|s| s.trace == request.trace).cloned().collect();
        let named = |name: &str| of_trace.iter().filter(|s| s.name == name).count();
        // Each process exports on its own schedule: the trace is whole once every part has arrived (the
        // follower table's worker and the bundled projectors' each apply it).
        let whole =
            ["graph.transaction", "ratelimit.check", "relay.publish", "plugin.call"].iter().all(|name| named(name) > 0)
                && named("projection.apply") >= 2
                && named("plugin.call") >= 3;
        whole.then_some(of_trace)
    };
    let logs = || deployment.logs(&["api", "relay", "worker"]);
    let arrived = tokio::time::timeout(Duration::from_secs(60), async {
        while trace().is_none() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    if arrived.await.is_err() {
        panic!("the follow's trace did not arrive within a minute: {:#?}\n{}", spans.lock().unwrap(), logs());
    }
    let trace = trace().unwrap();
    let by_name = |name: &str| trace.iter().filter(|s| s.name == name).cloned().collect::<Vec<_>>();
    let one = |name: &str| {
        let found = by_name(name);
        assert_eq!(found.len(), 1, "one {name} span in {trace:#?}");
        found[0].clone()
    };
    let by_id: HashMap<&str, &Received> = trace.iter().map(|s| (s.id.as_str(), s)).collect();

    let request = one(REQUEST);
    assert_eq!(request.parent, "", "the request's span begins the trace");
    let transaction = one("graph.transaction");
    let check = one("ratelimit.check");
    let publish = one("relay.publish");
    assert_eq!((transaction.parent.as_str(), check.parent.as_str()), (request.id.as_str(), request.id.as_str()));
    // The relay continues the span whose transaction wrote the outbox row; the workers continue the relay's.
    assert_eq!((publish.service.as_str(), publish.parent.as_str()), ("strand-relay", transaction.id.as_str()));
    for applied in by_name("projection.apply") {
        assert_eq!((applied.service.as_str(), applied.parent.as_str()), ("strand-worker", publish.id.as_str()));
    }
    // Each process's plugin calls are children of its own span: the rate limiter, the router, the projector.
    let calls = by_name("plugin.call");
    for (service, within) in
        [("strand-serve", "ratelimit.check"), ("strand-relay", "relay.publish"), ("strand-worker", "projection.apply")]
    {
        let inside = calls.iter().any(|call| {
            call.service == service && by_id.get(call.parent.as_str()).is_some_and(|parent| parent.name == within)
        });
        assert!(inside, "no plugin call of {service} inside {within}: {trace:#?}");
    }
}
