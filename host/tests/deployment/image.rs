//! The OCI image (`deploy/image/build`): built from nothing pulled, it runs alone on the embedded default,
//! as an unprivileged user, and a follow works.

use crate::containers::{image, podman, Container};
use crate::{answering_with, counts, port};

#[tokio::test]
async fn the_image_serves_a_follow_on_the_embedded_default_as_an_unprivileged_user() {
    let image = image();
    let config = podman(&["image", "inspect", "--format", "{{.Config.User}} {{.Size}}", image]);
    let (user, size) = config.trim().split_once(' ').expect("user and size");
    assert_eq!(user, "10001:10001", "the image runs as the unprivileged `strand` user");
    let megabytes = size.parse::<u64>().expect("a size in bytes") / 1_000_000;
    assert!(megabytes < 100, "the image weighs {megabytes} MB");

    // Nothing configured but the address (the host's network is shared with other tests).
    let port = port();
    let container =
        Container::run(&format!("strand-image-{port}"), &["--env", &format!("STRAND_LISTEN=127.0.0.1:{port}"), image]);
    answering_with(port, || container.log()).await;
    let uid = podman(&["top", &container.name, "huser"]);
    assert_eq!(uid.lines().nth(1).map(str::trim), Some("10001"), "the server's process runs as uid 10001");

    // The CLI in the same image mints a token with the server's own development key.
    let token = container.strand(&["token", "--sub", "1"]);
    let http = reqwest::Client::new();
    let followed =
        http.put(format!("http://127.0.0.1:{port}/v1/me/following/2")).bearer_auth(token.trim()).send().await.unwrap();
    assert_eq!(followed.status(), 200, "{}", container.log());
    let counts = counts(&format!("http://127.0.0.1:{port}"), token.trim(), 2).await;
    assert_eq!(counts["followers"], 1, "{counts}");
}
