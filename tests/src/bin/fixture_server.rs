//! `tutti-fixture-server`: the fixture MCP server (see `tutti_tests::fixture`).
#![forbid(unsafe_code)]

use std::path::PathBuf;

use clap::Parser;
use clap::builder::TypedValueParser as _;
use tutti_tests::fixture::{self, Config};

/// A scriptable MCP server for tests: stdio (default) or legacy Streamable HTTP (`--http`).
#[derive(Debug, Parser)]
#[command(name = "tutti-fixture-server", version)]
struct Args {
    /// Comma-separated built-in tools or tool sets.
    #[arg(long, value_delimiter = ',', default_value = "echo,add")]
    tools: Vec<String>,
    /// Paginate tools/list with this many tools per page.
    #[arg(long, value_name = "N")]
    page_size: Option<usize>,
    /// Add N generated tools tool_0000….
    #[arg(long, value_name = "N", default_value_t = 0)]
    many: usize,
    /// Append one JSON line per received message to FILE.
    #[arg(long, value_name = "FILE")]
    record: Option<PathBuf>,
    /// Print N non-JSON lines on stdout before anything else.
    #[arg(long, value_name = "N", default_value_t = 0)]
    banner: usize,
    /// Print every environment variable to stderr at start.
    #[arg(long)]
    stderr_env: bool,
    /// Print the value of environment variable NAME to stderr at start, as it is (a
    /// multi-line value stays multi-line).
    #[arg(long, value_name = "NAME")]
    stderr_secret_env: Option<String>,
    /// Print a line of terminal escapes (OSC 52, CSI colours, BEL) and Unicode format
    /// characters (U+202E, U+200B) to stderr at start.
    #[arg(long)]
    stderr_hostile: bool,
    /// Add a tool `big_schema` whose input schema holds a description of N bytes.
    #[arg(long, value_name = "N", default_value_t = 0)]
    big_schema: usize,
    /// Add a tool `patterned` whose argument `items` is an array of strings that must each
    /// match PATTERN (the schema's `pattern`).
    #[arg(long, value_name = "PATTERN")]
    pattern_tool: Option<String>,
    /// Exit 1 immediately.
    #[arg(long)]
    crash_at_start: bool,
    /// Never answer anything (initialize included).
    #[arg(long)]
    hang_at_start: bool,
    /// Answer N tools/call, then exit 1 (0: exit at the first call without answering).
    #[arg(long, value_name = "N")]
    exit_after_calls: Option<u64>,
    /// Spawn a child of this program that sleeps forever.
    #[arg(long)]
    grandchild: bool,
    /// Spawn a child of this program that leaves our session and process group (`setsid()`)
    /// and sleeps forever.
    #[arg(long)]
    setsid_grandchild: bool,
    /// Sleep forever (the grandchild's mode).
    #[arg(long)]
    sleep_forever: bool,
    /// With --sleep-forever: call setsid() first (Unix).
    #[arg(long, requires = "sleep_forever")]
    setsid: bool,
    /// Add a tool whose inputSchema is {"type":"string"}.
    #[arg(long)]
    bad_schema: bool,
    /// Add tools `a.b` and `a_b`.
    #[arg(long)]
    collide: bool,
    /// N ms after initialized, add tool `late` and send notifications/tools/list_changed.
    #[arg(long, value_name = "N")]
    list_changed_after_ms: Option<u64>,
    /// N ms after initialized, change `echo`'s description, then add tool `exfiltrate`
    /// (each with notifications/tools/list_changed).
    #[arg(long, value_name = "N")]
    rug_pull_after_ms: Option<u64>,
    /// Create FILE at the rug pull; start pulled when it exists.
    #[arg(long, value_name = "FILE")]
    rug_pull_state: Option<std::path::PathBuf>,
    /// Ignore notifications/cancelled.
    #[arg(long)]
    ignore_cancel: bool,
    /// Serve legacy Streamable HTTP on 127.0.0.1:PORT/mcp instead of stdio (0 = pick).
    #[arg(long, value_name = "PORT")]
    http: Option<u16>,
    /// With --http: require `Authorization: Bearer TOKEN`.
    #[arg(long, value_name = "TOKEN", requires = "http")]
    require_bearer: Option<String>,
    /// With --http: speak 2026-07-28 without sessions instead of 2025-06-18 with them.
    #[arg(long, requires = "http")]
    stateless: bool,
    /// With --http: answer tools/call as an event stream (one `data:` event).
    #[arg(long, requires = "http")]
    sse: bool,
    /// With --http: the status (400 or 404) for a session id the server does not know.
    #[arg(long, value_name = "STATUS", requires = "http", default_value = "404",
          value_parser = clap::builder::PossibleValuesParser::new(["400", "404"])
              .map(|s| if s == "400" { 400u16 } else { 404 }))]
    unknown_session: u16,
    /// Offer a text resource with this URI (repeatable); declares `resources`.
    #[arg(long = "resource", value_name = "URI")]
    resources: Vec<String>,
    /// Offer a prompt with this name (repeatable); declares `prompts`.
    #[arg(long = "prompt", value_name = "NAME")]
    prompts: Vec<String>,
    /// Offer the conformance suite's prompts, resources, template and completion.
    #[arg(long)]
    conformance_catalog: bool,
    /// Offer N generated prompts prompt_0000…; declares `prompts`.
    #[arg(long, value_name = "N", default_value_t = 0)]
    many_prompts: usize,
    /// Offer N generated text resources gen://r/0000…; declares `resources`.
    #[arg(long, value_name = "N", default_value_t = 0)]
    many_resources: usize,
    /// Offer a resource gen://big whose description is N bytes; declares `resources`.
    #[arg(long, value_name = "N", default_value_t = 0)]
    big_resource: usize,
    /// Every N ms: `notifications/resources/updated` for each subscribed URI and a log
    /// message outside any request (stdio only).
    #[arg(long, value_name = "MS")]
    tick_ms: Option<u64>,
    /// Before serving, write an instruction-override Markdown text to FILE (relative to the
    /// working directory).
    #[arg(long, value_name = "FILE")]
    write_at_start: Option<PathBuf>,
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    fixture::run(Config {
        tools: a.tools,
        page_size: a.page_size,
        many: a.many,
        record: a.record,
        banner: a.banner,
        stderr_env: a.stderr_env,
        stderr_secret_env: a.stderr_secret_env,
        stderr_hostile: a.stderr_hostile,
        big_schema: a.big_schema,
        pattern_tool: a.pattern_tool,
        crash_at_start: a.crash_at_start,
        hang_at_start: a.hang_at_start,
        exit_after_calls: a.exit_after_calls,
        grandchild: a.grandchild,
        setsid_grandchild: a.setsid_grandchild,
        sleep_forever: a.sleep_forever,
        setsid: a.setsid,
        bad_schema: a.bad_schema,
        collide: a.collide,
        list_changed_after_ms: a.list_changed_after_ms,
        rug_pull_after_ms: a.rug_pull_after_ms,
        rug_pull_state: a.rug_pull_state,
        ignore_cancel: a.ignore_cancel,
        http: a.http,
        require_bearer: a.require_bearer,
        resources: a.resources,
        prompts: a.prompts,
        conformance_catalog: a.conformance_catalog,
        many_prompts: a.many_prompts,
        many_resources: a.many_resources,
        big_resource: a.big_resource,
        tick_ms: a.tick_ms,
        write_at_start: a.write_at_start,
        http_mode: fixture::HttpMode {
            stateless: a.stateless,
            sse: a.sse,
            unknown_session_status: a.unknown_session,
        },
    })?;
    Ok(())
}
