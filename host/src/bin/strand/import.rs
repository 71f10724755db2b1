//! `strand import`: a graph into a tenant through the admin API, streamed — from an NDJSON or CSV file, or
//! straight from a MySQL/MariaDB database holding the seed system's `following` table
//! (`from_user_id`, `to_user_id`, `rel_status` 1 a follow, `created_at` as a date-time or epoch seconds or
//! milliseconds). The server writes it and answers with what it did; the lines sent are counted as they go.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context};
use bytes::Bytes;
use clap::Args;
use futures::{SinkExt, Stream, StreamExt, TryStreamExt};
use mysql_async::prelude::Queryable;
use strand::config::Config;
use strand::transfer::import::{ImportFormat, ImportReport};
use tokio_util::io::ReaderStream;

use crate::plugin::{admin_call, base_url, print_json};

#[derive(Args)]
pub struct ImportArgs {
    /// The tenant the graph goes into.
    #[arg(long)]
    tenant: String,
    /// An NDJSON file (the tenant export's format) or a CSV file of `from,to[,at_ms]` follows (`.csv`).
    #[arg(conflicts_with = "from_mysql", required_unless_present = "from_mysql")]
    file: Option<PathBuf>,
    /// The file's format, when its name does not say (`ndjson` or `csv`).
    #[arg(long)]
    format: Option<ImportFormat>,
    /// A MySQL/MariaDB URL (`mysql://user:password@host:3306/database`) whose seed-schema table to import.
    #[arg(long)]
    from_mysql: Option<String>,
    /// The seed table's name in that database.
    #[arg(long, default_value = "following")]
    table: String,
    /// Base URL of a running Strand; defaults to the configured `listen` address.
    #[arg(long)]
    server: Option<String>,
}

type Chunks = std::pin::Pin<Box<dyn Stream<Item = anyhow::Result<Bytes>> + Send>>;

pub async fn run(args: ImportArgs, config: &Config) -> anyhow::Result<()> {
    let (format, chunks): (ImportFormat, Chunks) = match (&args.file, &args.from_mysql) {
        (Some(path), _) => {
            let file = tokio::fs::File::open(path).await.with_context(|| format!("opening {}", path.display()))?;
            let by_name =
                if path.extension().is_some_and(|e| e == "csv") { ImportFormat::Csv } else { ImportFormat::Ndjson };
            (args.format.unwrap_or(by_name), ReaderStream::with_capacity(file, 1 << 16).map_err(Into::into).boxed())
        }
        (None, Some(url)) => (ImportFormat::Csv, seed_rows(url, &args.table).await?),
        (None, None) => bail!("name a file or --from-mysql"),
    };
    let sent = Arc::new(AtomicU64::new(0));
    let counted = sent.clone();
    let chunks = chunks.inspect_ok(move |chunk| {
        let lines = counted.fetch_add(bytecount(chunk), Ordering::Relaxed);
        if lines / 100_000 != (lines + bytecount(chunk)) / 100_000 {
            eprint!("\r{:>12} lines sent", lines + bytecount(chunk));
        }
    });
    let url = format!(
        "{}/admin/v1/tenants/{}/import?format={}",
        base_url(config, args.server.as_deref()),
        args.tenant,
        format.as_str()
    );
    let request = reqwest::Client::new().post(url).body(reqwest::Body::wrap_stream(chunks));
    let report: ImportReport = admin_call(config, request).await?;
    eprintln!("\r{:>12} lines sent", sent.load(Ordering::Relaxed));
    print_json(&report)
}

fn bytecount(chunk: &Bytes) -> u64 {
    chunk.iter().filter(|&&b| b == b'\n').count() as u64
}

/// The seed table's follows as CSV lines, streamed from one consistent read of the source.
async fn seed_rows(url: &str, table: &str) -> anyhow::Result<Chunks> {
    if table.is_empty() || !table.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        bail!("--table is a plain table name (letters, digits, _), got {table:?}");
    }
    let pool = mysql_async::Pool::from_url(url).context("reading the --from-mysql URL")?;
    let mut conn = pool.get_conn().await.context("connecting to the seed database")?;
    let created: Option<String> = conn
        .exec_first(
            "SELECT DATA_TYPE FROM information_schema.COLUMNS WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ? \
             AND COLUMN_NAME = 'created_at'",
            (table,),
        )
        .await
        .context("reading the seed table's columns")?;
    let at_ms = match created.as_deref().map(str::to_ascii_lowercase).as_deref() {
        None => bail!("the seed database has no table {table:?} with a created_at column"),
        Some("datetime" | "timestamp" | "date") => "CAST(UNIX_TIMESTAMP(created_at) * 1000 AS SIGNED)",
        // Epoch seconds or milliseconds: a time in seconds is below 10^11 until the year 5138.
        Some(_) => "CASE WHEN created_at < 100000000000 THEN created_at * 1000 ELSE created_at END",
    };
    let sql = format!("SELECT from_user_id, to_user_id, {at_ms} FROM {table} WHERE rel_status = 1");
    let (mut sender, chunks) = futures::channel::mpsc::channel::<anyhow::Result<Bytes>>(4);
    tokio::spawn(async move {
        let read = async {
            let mut rows = conn.query_stream::<(i64, i64, Option<i64>), _>(sql).await?;
            let mut chunk = String::with_capacity(CHUNK + 64);
            while let Some((from, to, at)) = rows.next().await.transpose()? {
                match at {
                    Some(at) => chunk.push_str(&format!("{from},{to},{at}\n")),
                    None => chunk.push_str(&format!("{from},{to}\n")),
                }
                if chunk.len() >= CHUNK {
                    sender.send(Ok(Bytes::from(std::mem::take(&mut chunk)))).await?;
                }
            }
            sender.send(Ok(Bytes::from(chunk))).await?;
            anyhow::Ok(())
        };
        if let Err(error) = read.await {
            // The upload ends with the error; if it ended already, the request's own error is reported.
            sender.send(Err(error.context("reading the seed table"))).await.ok();
        }
    });
    Ok(chunks.boxed())
}

/// Bytes of CSV per chunk sent.
const CHUNK: usize = 1 << 16;
