//! The Kubernetes manifests (`deploy/kubernetes/`) run by `podman kube play` on the image under test, beside
//! throwaway MariaDB (binlog), Redis and the broker on the host. An overlay — the one a platform team writes,
//! plus what one machine needs: host networking, so each Deployment gets its own ports, and one API node and
//! one worker, since podman has no Service to spread them — leaves every probe, volume and security setting
//! as shipped. The migration Job runs first (the pods only check the schema); a follow reaches the counts;
//! the worker pod and the active relay's pod are deleted under writes and nothing is lost; `podman kube
//! down` stops every process cleanly. What podman does not enforce — every workload on the one image, under
//! the restricted Pod Security Standard, with the config and the Secret — is read from the manifests.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use serde_json::{json, Value};
use strand_test_support::{token, try_wait_until, wait_until, TEST_SECRET};

use crate::containers::{image, in_repository, podman, podman_output};
use crate::scale_out::{storm, ROUNDS};
use crate::{answering_with, counts, port, Deployment};

/// The manifests, played; their pods and the secret removed when dropped (the test's own `kube down`
/// comes first, so this only matters when it fails half-way).
struct Played {
    dir: tempfile::TempDir,
}

impl Played {
    fn manifest(&self, name: &str) -> String {
        self.dir.path().join(name).display().to_string()
    }

    /// `podman logs` of the `strand` container of `pod`.
    fn log(&self, pod: &str) -> String {
        let output = podman_output(&["logs", &format!("{pod}-strand")]);
        format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr))
    }

    fn logs(&self) -> String {
        PODS.iter()
            .map(|pod| {
                let log = self.log(pod);
                let lines: Vec<&str> = log.lines().collect();
                format!("--- {pod}:\n{}", lines[lines.len().saturating_sub(15)..].join("\n"))
            })
            .collect::<Vec<_>>()
            .join("\n")
    }
}

impl Drop for Played {
    fn drop(&mut self) {
        remove_pods();
        let _ = podman_output(&["secret", "rm", SECRET]);
    }
}

/// The pods the manifests make, as the test plays them.
const PODS: [&str; 4] = ["strand-api-pod-0", "strand-relay-pod-0", "strand-relay-pod-1", "strand-worker-pod-0"];

/// The pod of the migration Job: podman has no Job controller, so the test plays the Job's template as a
/// Pod of this name.
const MIGRATION: &str = "strand-migrate";

/// Removes whichever of [`PODS`] and [`MIGRATION`] exist (`kube down` stops at the first one missing).
fn remove_pods() {
    let mut remove = vec!["pod", "rm", "--force", "--ignore", MIGRATION];
    remove.extend(PODS);
    let _ = podman_output(&remove);
}

/// The Secret the manifests read their `STRAND_*` variables from.
const SECRET: &str = "strand-secrets";

/// The overlay, in `dir`, of `deploy/kubernetes` for this machine: the test's image, host networking, the
/// given ports (podman 4.3 refuses declared container ports on the host's network, so they go).
fn overlay(dir: &Path, api: u16, api_operations: u16, worker_operations: u16) -> String {
    // Kustomize takes a base only by a relative path.
    let up = "../".repeat(dir.canonicalize().unwrap().components().count() - 1);
    let base = in_repository("deploy/kubernetes").canonicalize().unwrap();
    let base = format!("{up}{}", base.display().to_string().trim_start_matches('/'));
    let env = |deployment: &str, replicas: u32, vars: &[(&str, String)]| {
        let vars: String = vars
            .iter()
            .map(|(name, value)| format!("\n                - {{name: {name}, value: \"{value}\"}}"))
            .collect();
        format!(
            "  - patch: |-\n      apiVersion: apps/v1\n      kind: Deployment\n      metadata: {{name: {deployment}}}\n      \
             spec:\n        replicas: {replicas}\n        template:\n          spec:\n            hostNetwork: true\n            \
             containers:\n              - name: strand\n                ports: null\n                env:{vars}\n"
        )
    };
    let (image_name, image_tag) = image().split_once(':').expect("name:tag");
    let job =
        "  - patch: |-\n      apiVersion: batch/v1\n      kind: Job\n      metadata: {name: strand-migrate}\n      \
               spec:\n        template:\n          spec:\n            hostNetwork: true\n";
    format!(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - {base}\n\
         images:\n  - {{name: localhost/strand, newName: {image_name}, newTag: {image_tag}}}\npatches:\n{job}{}{}{}",
        env(
            "strand-api",
            1,
            &[
                ("STRAND_LISTEN", format!("127.0.0.1:{api}")),
                ("STRAND_OPERATIONS_LISTEN", format!("127.0.0.1:{api_operations}")),
            ]
        ),
        // Both relays on the host's network: their scrape ports would collide, so each takes any free one.
        env("strand-relay", 2, &[("STRAND_OPERATIONS_LISTEN", "127.0.0.1:0".to_owned())]),
        env("strand-worker", 1, &[("STRAND_OPERATIONS_LISTEN", format!("127.0.0.1:{worker_operations}"))]),
    )
}

/// The rendered manifests split into documents, without the Secret — podman 4.3's `kube play` stores a
/// Secret document in a form its own `envFrom` cannot read, so the test creates it as podman expects — and
/// without the Job, which podman does not play (the test plays its pod).
fn documents(rendered: &str) -> Vec<String> {
    rendered
        .split("\n---\n")
        .filter(|document| !document.lines().any(|line| line == "kind: Secret" || line == "kind: Job"))
        .map(|document| document.trim().to_owned())
        .collect()
}

/// The objects the kustomization in `dir` renders, as JSON: kubectl converts without a cluster only in a
/// `--local` command, here one removing a label that no object has.
fn objects(dir: &Path) -> Vec<Value> {
    let output = std::process::Command::new("kubectl")
        .args(["label", "--local", "--output", "json", "--kustomize"])
        .arg(dir)
        .arg("strand.test/none-")
        .output()
        .unwrap();
    assert!(output.status.success(), "kubectl label --local: {}", String::from_utf8_lossy(&output.stderr));
    serde_json::Deserializer::from_slice(&output.stdout).into_iter().map(Result::unwrap).collect()
}

/// The pod (of `relays`) whose relay took the lock and publishes.
fn active_relay<'a>(played: &Played, relays: &[&'a str]) -> Option<&'a str> {
    relays.iter().copied().find(|pod| played.log(pod).contains("this relay is now the active one"))
}

#[test]
fn every_workload_runs_the_image_restricted_with_the_config_and_the_secret() {
    let objects = objects(&in_repository("deploy/kubernetes"));
    let workloads: Vec<&Value> =
        objects.iter().filter(|object| object["kind"] == "Deployment" || object["kind"] == "Job").collect();
    let mut names: Vec<&str> = workloads.iter().map(|w| w["metadata"]["name"].as_str().unwrap()).collect();
    names.sort_unstable();
    assert_eq!(names, ["strand-api", "strand-migrate", "strand-relay", "strand-worker"]);
    let image = &workloads[0]["spec"]["template"]["spec"]["containers"][0]["image"];
    for workload in &workloads {
        let (name, pod) = (&workload["metadata"]["name"], &workload["spec"]["template"]["spec"]);
        assert_eq!(pod["automountServiceAccountToken"], false, "{name}");
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true, "{name}");
        assert_eq!(pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault", "{name}");
        let config = json!({"name": "config", "configMap": {"name": "strand-config"}});
        assert!(pod["volumes"].as_array().unwrap().contains(&config), "{name}: {}", pod["volumes"]);
        let [container] = pod["containers"].as_array().unwrap().as_slice() else { panic!("{name}: one container") };
        assert_eq!(&container["image"], image, "{name}");
        let restricted = json!({"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true, "capabilities": {"drop": ["ALL"]}});
        assert_eq!(container["securityContext"], restricted, "{name}");
        let mount = json!({"name": "config", "mountPath": "/etc/strand", "readOnly": true});
        assert!(
            container["volumeMounts"].as_array().unwrap().contains(&mount),
            "{name}: {}",
            container["volumeMounts"]
        );
        let read = json!({"name": "STRAND_CONFIG", "value": "/etc/strand/config.toml"});
        assert!(container["env"].as_array().unwrap().contains(&read), "{name}: {}", container["env"]);
        assert_eq!(container["envFrom"], json!([{"secretRef": {"name": "strand-secrets"}}]), "{name}");
    }
    let job = workloads.iter().find(|w| w["kind"] == "Job").unwrap();
    assert_eq!(job["spec"]["template"]["spec"]["containers"][0]["args"], json!(["migrate"]));

    // The Job migrates; the pods only check the schema.
    let config = objects.iter().find(|object| object["kind"] == "ConfigMap").expect("the ConfigMap");
    let config: toml::Table = config["data"]["config.toml"].as_str().unwrap().parse().unwrap();
    assert_eq!(config.get("migrate_on_start"), Some(&toml::Value::Boolean(false)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_manifests_serve_under_podman_kube_play_and_lose_nothing_when_pods_are_deleted() {
    image();
    let deployment = Deployment::new().await;
    let (api, api_operations, worker_operations) = (port(), port(), port());

    // The Secret: every setting of the deployment but the plugin cache, which is the image's own /data.
    let secret: serde_json::Map<String, Value> = deployment
        .settings()
        .iter()
        .filter(|(key, _)| key != "STRAND_PLUGIN_CACHE_DIR")
        .map(|(key, value)| (key.clone(), Value::from(base64::engine::general_purpose::STANDARD.encode(value))))
        .collect();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("kustomization.yaml"), overlay(dir.path(), api, api_operations, worker_operations))
        .unwrap();
    std::fs::write(dir.path().join("secret.json"), Value::Object(secret).to_string()).unwrap();
    let rendered = std::process::Command::new("kubectl").args(["kustomize"]).arg(dir.path()).output().unwrap();
    assert!(rendered.status.success(), "kubectl kustomize: {}", String::from_utf8_lossy(&rendered.stderr));
    let documents = documents(&String::from_utf8_lossy(&rendered.stdout));
    std::fs::write(dir.path().join("played.yaml"), documents.join("\n---\n")).unwrap();
    // The Job's pod, as its controller would make it, beside the ConfigMap it mounts.
    let objects = objects(dir.path());
    let job = objects.iter().find(|object| object["kind"] == "Job").expect("the migration Job");
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": MIGRATION}, "spec": job["spec"]["template"]["spec"]});
    let config = objects.iter().find(|object| object["kind"] == "ConfigMap").expect("the ConfigMap");
    std::fs::write(dir.path().join("migrate.yaml"), format!("{config}\n---\n{pod}")).unwrap();
    // Each Deployment alone (with the ConfigMap), to play again for the controller podman does not have.
    for name in ["strand-worker", "strand-relay"] {
        let alone: Vec<&str> = documents
            .iter()
            .filter(|d| d.contains("kind: ConfigMap") || d.contains(&format!("  name: {name}\n")))
            .map(String::as_str)
            .collect();
        std::fs::write(dir.path().join(format!("{name}.yaml")), alone.join("\n---\n")).unwrap();
    }
    let played = Played { dir };
    let _ = podman_output(&["secret", "rm", SECRET]);
    podman(&["secret", "create", SECRET, &played.manifest("secret.json")]);
    remove_pods(); // what a test cut short left behind
                   // The release's one migration step; then the pods, which only check the schema.
    podman(&["kube", "play", &played.manifest("migrate.yaml")]);
    let exited = podman(&["wait", &format!("{MIGRATION}-strand")]);
    let log = played.log(MIGRATION);
    assert!(exited.trim() == "0" && log.contains("up to date"), "the migration exited {exited}: {log}");
    podman(&["pod", "rm", "--force", MIGRATION]);
    podman(&["kube", "play", &played.manifest("played.yaml")]);
    answering_with(api, || played.logs()).await;
    // What the manifests' probes ask: readiness on the API's port, liveness on each operations port.
    let http = reqwest::Client::new();
    for probe in [format!("{api}/readyz"), format!("{api_operations}/healthz"), format!("{worker_operations}/healthz")]
    {
        wait_until(&format!("{probe} answers 200"), Duration::from_secs(60), || async {
            http.get(format!("http://127.0.0.1:{probe}")).send().await.is_ok_and(|r| r.status() == 200)
        })
        .await;
    }

    // A follow over HTTP reaches the counts through the pipeline: published by the relay (the outbox empty),
    // applied by the worker (the follower table and counters equal the truth), served by the API node.
    let bearer = token(TEST_SECRET, "100", "scaled", 3600);
    let followed =
        http.put(format!("http://127.0.0.1:{api}/v1/me/following/200")).bearer_auth(&bearer).send().await.unwrap();
    assert_eq!(followed.status(), 200);
    if let Err(state) = deployment.settled(Duration::from_secs(120)).await {
        panic!("the follow was not projected within 2 minutes: {state}\n{}", played.logs());
    }
    let counts = counts(&format!("http://127.0.0.1:{api}"), &bearer, 200).await;
    assert_eq!(counts["followers"], 1, "{counts}");

    // Under writes, the worker pod and the active relay's pod are deleted. The standby relay takes over on its
    // own; podman has no ReplicaSet controller, so the test plays the worker's Deployment again at once, and
    // the relays' once the standby leads (podman cannot add only the missing replica, so the survivor is
    // deleted too, with SIGTERM, and both come back: a restart of the Deployment, as an update makes).
    let relays = ["strand-relay-pod-0", "strand-relay-pod-1"];
    // The relay that published says so in its log (which podman writes a moment later).
    let mut first = None;
    let logged = try_wait_until("a relay logs that it is the active one", Duration::from_secs(60), || {
        first = active_relay(&played, &relays);
        std::future::ready(first.is_some())
    })
    .await;
    if let Err(timed_out) = logged {
        panic!("{timed_out}\n{}", played.logs());
    }
    let first = first.expect("the active relay");
    // The storm runs as a task of its own, so it keeps writing while this one waits on podman.
    let done = Arc::new(AtomicUsize::new(0));
    let total = (10 * 9 * ROUNDS) as usize;
    let writes = tokio::spawn({
        let done = done.clone();
        async move { storm([api, api], &done).await }
    });
    let churn = async {
        wait_until("a third of the writes acknowledged", Duration::from_secs(120), || {
            std::future::ready(done.load(Ordering::Relaxed) >= total / 3)
        })
        .await;
        podman(&["pod", "rm", "--force", "strand-worker-pod-0"]);
        podman(&["kube", "play", &played.manifest("strand-worker.yaml")]);
        wait_until("two thirds of the writes acknowledged", Duration::from_secs(120), || {
            std::future::ready(done.load(Ordering::Relaxed) >= 2 * total / 3)
        })
        .await;
        podman(&["pod", "rm", "--force", first]);
        let second = relays.iter().copied().find(|pod| *pod != first).unwrap();
        let led = try_wait_until("the standby relay leads", Duration::from_secs(60), || {
            std::future::ready(played.log(second).contains("this relay is now the active one"))
        })
        .await;
        if let Err(timed_out) = led {
            panic!("{timed_out}\n{}", played.logs());
        }
        podman(&["pod", "rm", "--force", second]);
        podman(&["kube", "play", &played.manifest("strand-relay.yaml")]);
    };
    churn.await;
    writes.await.expect("every write acknowledged");
    match deployment.settled(Duration::from_secs(180)).await {
        Ok(report) => assert_eq!(report.pairs_checked, 91, "{report}"),
        Err(state) => panic!("not settled after 3 minutes: {state}\n{}", played.logs()),
    }
    // What each process holds after the storm, printed beside the manifests' requests (not asserted).
    let stats = podman(&["stats", "--no-stream", "--format", "{{.Name}} {{.MemUsage}} {{.AVGCPU}}"]);
    println!("after the storm:\n{}", stats.lines().filter(|l| l.contains("-strand ")).collect::<Vec<_>>().join("\n"));

    // `kube down` sends SIGTERM and podman waits (10 s) for each process to exit before it would kill it.
    let down = podman_output(&["kube", "down", &played.manifest("played.yaml")]);
    let said = String::from_utf8_lossy(&down.stderr);
    assert!(down.status.success() && !said.contains("SIGKILL"), "kube down: {said}");
    let left = podman(&["pod", "ps", "--filter", "name=strand-", "--format", "{{.Name}}"]);
    assert_eq!(left.trim(), "", "pods left after kube down");
}
