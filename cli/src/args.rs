//! The command line (SPEC §4, §6, §7), as clap derive types.
//!
//! `tutti connector capabilities|skills|skill|invoke` deliberately do not exist: clap rejects
//! them as unrecognized subcommands and they appear in no help.

use std::path::PathBuf;

use clap::{ArgGroup, Args, Parser, Subcommand, ValueEnum};

/// The `tutti` command line.
#[derive(Debug, Parser)]
#[command(
    name = "tutti",
    version,
    about = "Tutti connector runtime: one local MCP server and CLI shims for your agents",
    propagate_version = true
)]
pub struct Cli {
    /// State directory [default: $TUTTI_STATE_DIR, else the platform default]
    #[arg(long, global = true, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,

    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the runtime (tutti-kernel) in the foreground; prints the MCP URL once ready
    Up(UpArgs),
    /// Stop the runtime `tutti up` started for this state dir and wait until every process of
    /// it is gone (a runtime the service manager runs: says how to stop the service)
    Down,
    /// Show the kernel, the frontend and every connector
    Status(StatusArgs),
    /// Install, connect, probe and list connectors
    #[command(subcommand)]
    Connector(ConnectorCommand),
    /// Show the kernel's log, or a connector's (already redacted)
    Logs(LogsArgs),
    /// Check what commonly goes wrong and print the fix for each problem (writes nothing)
    Doctor(JsonFlag),
    /// Issue and revoke agent session tokens
    #[command(subcommand)]
    Session(SessionCommand),
    /// List, allow and deny the high-risk calls that wait for your confirmation
    #[command(subcommand)]
    Confirm(ConfirmCommand),
    /// Run the kernel under the system's service manager (systemd, launchd, Windows services)
    #[command(subcommand)]
    Service(ServiceCommand),
    /// List, add and remove the MCP registries that search and install ask
    #[command(subcommand)]
    Registry(RegistryCommand),
    /// Serve a local web page for connectors, tools, sessions and activity (127.0.0.1 only)
    Console(ConsoleArgs),
    /// Serve MCP over stdio for clients that launch servers as commands: a bridge to the
    /// runtime's frontend with a session token of its own
    McpStdio(McpStdioArgs),
}

#[derive(Debug, Args)]
pub struct McpStdioArgs {
    /// Workspace the session belongs to [default: the current directory]
    #[arg(long, value_name = "W")]
    pub workspace: Option<String>,
    /// Session id [default: mcp-stdio-<pid>]
    #[arg(long, value_name = "S")]
    pub session: Option<String>,
    /// What the session's tools/list holds (as `session issue --tools`)
    #[arg(long, value_enum, default_value_t = ToolsArg::All)]
    pub tools: ToolsArg,
    #[command(flatten)]
    pub confirm: ConfirmArgs,
}

#[derive(Debug, Args)]
pub struct ConsoleArgs {
    /// Print the one-time login URL without opening a browser
    #[arg(long)]
    pub no_open: bool,
    /// Listen on this port of 127.0.0.1 [default: a free port]
    #[arg(long, value_name = "P", default_value_t = 0, hide_default_value = true)]
    pub port: u16,
}

#[derive(Debug, Args)]
pub struct LogsArgs {
    /// A connector's key; without it, the kernel's log
    pub key: Option<String>,
    /// Keep printing new lines as they are written, until Ctrl-C
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Only lines of the last DURATION (e.g. 30s, 15m, 2h, 1d)
    #[arg(long, value_name = "DURATION")]
    pub since: Option<String>,
    /// One JSON object per line: JSON log lines (TUTTI_LOG_FORMAT=json) as written, other
    /// lines as {"timestamp","text"}
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print JSON instead of a table
    #[arg(long)]
    pub json: bool,
    /// Redraw every second until Ctrl-C (with --json: one JSON line per second)
    #[arg(long)]
    pub watch: bool,
}

#[derive(Debug, Args)]
pub struct UpArgs {
    /// Install and connect the bundled example connectors first
    #[arg(long)]
    pub demo: bool,
}

#[derive(Debug, Args)]
pub struct JsonFlag {
    /// Print JSON instead of a table
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum ConnectorCommand {
    /// Install (or upgrade) a connector: a release directory, a server.json, registry:NAME,
    /// npm:PACKAGE, pypi:PACKAGE, an .mcpb bundle or oci:IMAGE
    Install(InstallArgs),
    /// Search the configured MCP registries
    Search(SearchArgs),
    /// Remove a connector: routes, shims, worker and secrets
    Uninstall(KeyArg),
    /// Store a connector's secret values and make it routable
    Connect(ConnectArgs),
    /// Delete a connector's secret values
    Disconnect(KeyArg),
    /// Start a connector's upstream once, list its tools and problems, stop it
    Probe(ProbeArgs),
    /// List installed connectors, their skills and interfaces (for agents)
    Available(JsonFlag),
    /// Show how a connector's offered definitions differ from the pinned ones
    Review(KeyArg),
    /// Commit the definitions that await review and pin them
    Approve(KeyArg),
    /// Turn the MCP servers of your clients' configs (Claude, Cursor, VS Code, Codex,
    /// Windsurf, Gemini) into connectors
    Import(ImportArgs),
    /// Write one lock file naming every installed connector, its release and artefact hashes
    Lock(LockArgs),
    /// Make this runtime hold exactly the connectors of a lock file
    Sync(SyncArgs),
    /// List market-installed connectors whose source has a newer version
    Outdated(JsonFlag),
    /// Build, confirm and install the newer pinned release of a market-installed connector
    Upgrade(UpgradeArgs),
}

#[derive(Debug, Args)]
pub struct LockArgs {
    /// Where to write the lock file
    #[arg(
        long,
        short = 'o',
        value_name = "FILE",
        default_value = "tutti.lock.json"
    )]
    pub output: PathBuf,
    /// Print the result as JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct SyncArgs {
    /// A lock file written by `tutti connector lock`
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// Confirm non-interactively
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Also uninstall the connectors the lock file does not name
    #[arg(long)]
    pub prune: bool,
    /// Where the release folders of folder installs are (DIR/<key>, or DIR itself)
    #[arg(long = "from", value_name = "DIR")]
    pub from: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct UpgradeArgs {
    /// The connector's key
    #[arg(value_name = "KEY")]
    pub key: String,
    /// The version to move to [default: the source's latest]
    #[arg(long, value_name = "VERSION")]
    pub to: Option<String>,
    /// Confirm non-interactively
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Print the result as JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ImportArgs {
    /// A client (claude-desktop, claude-code, cursor, vscode, codex, windsurf, gemini) or a
    /// JSON/TOML file in one of their shapes (repeatable) [default: every client found]
    #[arg(long = "from", value_name = "CLIENT|FILE")]
    pub from: Vec<String>,
    /// Only the entries with these names
    #[arg(long, value_delimiter = ',', value_name = "NAME,...")]
    pub only: Vec<String>,
    /// Confirm non-interactively
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Then replace the imported entries in each file with one entry that runs the stdio
    /// bridge (a backup is written next to the file)
    #[arg(long)]
    pub rewrite: bool,
    /// Run npx/uvx/docker entries as written instead of pinning them (status shows unpinned)
    #[arg(long)]
    pub no_pin: bool,
    /// Take the value of a ${input:…}/${env:…} reference NAME from the environment variable
    /// NAME (repeatable)
    #[arg(long = "from-env", value_name = "NAME")]
    pub from_env: Vec<String>,
    /// Allow the imported connectors to run this program besides the launch allowlist: a name
    /// (the program PATH finds for it) or an absolute path (repeatable), as `install` takes it
    #[arg(long = "allow-command", value_name = "NAME|PATH")]
    pub allow_commands: Vec<String>,
    /// Restore a client's file (or FILE) as it was before --rewrite
    #[arg(long, value_name = "CLIENT|FILE", conflicts_with_all = ["from", "only", "rewrite", "no_pin", "allow_commands"])]
    pub undo: Option<String>,
}

#[derive(Debug, Args)]
pub struct InstallArgs {
    /// A release directory (holding connector.json), ./x/server.json,
    /// registry:NAME[@VERSION], npm:PACKAGE[@VERSION], pypi:PACKAGE[@VERSION], ./x.mcpb,
    /// mcpb:URL#sha256=HEX or oci:IMAGE[:TAG]
    #[arg(value_name = "SOURCE")]
    pub source: String,
    #[command(flatten)]
    pub market: MarketInstallArgs,
    /// Confirm non-interactively
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Allow the release to run this program: a name (the program PATH finds for it) or an
    /// absolute path (repeatable)
    #[arg(long = "allow-command", value_name = "NAME|PATH")]
    pub allow_commands: Vec<String>,
    /// Allow this loader or interpreter-injection variable (PATH, HOME, LD_*, NODE_OPTIONS,
    /// npm_config_*, PYTHONPATH, PIP_*, …) in the release's mcp.env or as a secret name (repeatable)
    #[arg(long = "allow-env", value_name = "NAME")]
    pub allow_env: Vec<String>,
    /// Commit changed or added tool definitions of this connector without review (they
    /// are pinned otherwise)
    #[arg(long)]
    pub trust_updates: bool,
    /// Print the result as JSON
    #[arg(long)]
    pub json: bool,
    /// Install although the skill scan found something (the findings are recorded)
    #[arg(long)]
    pub allow_skill_findings: bool,
    /// Start a stdio release's upstream once first, as `connector probe DIR` does
    /// (handshake, tools/list, schema check); install only if that passes
    #[arg(long)]
    pub probe: bool,
}

/// How a market source (SPEC §17) becomes a release.
#[derive(Debug, Args, Default)]
pub struct MarketInstallArgs {
    /// A value for an input of the server.json: a variable, an argument or a non-secret
    /// environment variable (repeatable)
    #[arg(long = "set", value_name = "NAME=VALUE", value_parser = parse_setting)]
    pub set: Vec<(String, String)>,
    /// Use the server.json's packages[N] (counted from 0)
    #[arg(long, value_name = "N", conflicts_with = "remote")]
    pub package: Option<u32>,
    /// Use the server.json's remotes[N] (counted from 0)
    #[arg(long, value_name = "N")]
    pub remote: Option<u32>,
    /// The connector key [default: from the server's name]
    #[arg(long, value_name = "K")]
    pub key: Option<String>,
    /// Run npm install scripts while pinning (off by default)
    #[arg(long)]
    pub allow_scripts: bool,
    /// Accept PyPI source distributions while pinning (wheels only by default)
    #[arg(long)]
    pub allow_sdist: bool,
}

pub(crate) fn parse_setting(s: &str) -> Result<(String, String), String> {
    match s.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_owned(), value.to_owned())),
        _ => Err(format!("{s:?} is not NAME=VALUE")),
    }
}

#[derive(Debug, Args)]
pub struct SearchArgs {
    /// Words to look for in server names
    #[arg(value_name = "WORDS", required = true)]
    pub words: Vec<String>,
    /// Ask only this registry (see `tutti registry list`)
    #[arg(long, value_name = "NAME")]
    pub registry: Option<String>,
    /// Print a JSON array instead of a table
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum RegistryCommand {
    /// List the registries, in the order they are asked
    List(JsonFlag),
    /// Add a registry (https://, or http:// to a loopback address)
    Add(RegistryAddArgs),
    /// Remove a registry (the official one too)
    Remove(RegistryNameArg),
}

#[derive(Debug, Args)]
pub struct RegistryAddArgs {
    /// A name for it: lowercase letters, digits and '-'
    #[arg(value_name = "NAME")]
    pub name: String,
    /// Its base URL (the API is under /v0.1/)
    #[arg(value_name = "URL")]
    pub url: String,
}

#[derive(Debug, Args)]
pub struct RegistryNameArg {
    /// The registry's name
    #[arg(value_name = "NAME")]
    pub name: String,
}

#[derive(Debug, Args)]
pub struct KeyArg {
    /// The connector key
    #[arg(value_name = "KEY")]
    pub key: String,
    /// Print the result as JSON
    #[arg(long)]
    pub json: bool,
}

/// Without `--from-env`/`--stdin` it only marks the connector connected again (a connector
/// that declares no secrets, after `disconnect`); the kernel says which secrets are missing.
#[derive(Debug, Args)]
pub struct ConnectArgs {
    /// The connector key
    #[arg(value_name = "KEY")]
    pub key: String,
    /// Take secret NAME from the environment variable NAME (repeatable)
    #[arg(long = "from-env", value_name = "NAME")]
    pub from_env: Vec<String>,
    /// Read secret NAME as one line of standard input (repeatable, read in order)
    #[arg(long = "stdin", value_name = "NAME")]
    pub stdin: Vec<String>,
    /// OAuth connectors: print the login URL instead of opening the browser
    #[arg(long = "no-browser")]
    pub no_browser: bool,
    /// Print the result as JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// A release directory, or the key of an installed connector
    #[arg(value_name = "DIR|KEY")]
    pub target: String,
    /// Allow the release to run this program: a name (the program PATH finds for it) or an
    /// absolute path (repeatable)
    #[arg(long = "allow-command", value_name = "NAME|PATH")]
    pub allow_commands: Vec<String>,
    /// Allow this loader or interpreter-injection variable in the release's mcp.env or as a
    /// secret name (repeatable)
    #[arg(long = "allow-env", value_name = "NAME")]
    pub allow_env: Vec<String>,
    /// Confirm non-interactively that a release directory's upstream may run
    #[arg(long, short = 'y')]
    pub yes: bool,
    /// Print JSON instead of a table
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum ConfirmCommand {
    /// The calls that wait for your confirmation, their arguments masked
    List(JsonFlag),
    /// Let the waiting call ID run, once
    Allow(ConfirmIdArg),
    /// Refuse the waiting call ID (nothing is sent)
    Deny(ConfirmIdArg),
}

#[derive(Debug, Args)]
pub struct ConfirmIdArg {
    /// The ID `tutti confirm list` shows
    #[arg(value_name = "ID")]
    pub id: String,
}

#[derive(Debug, Subcommand)]
pub enum SessionCommand {
    /// Issue a session token and print the agent binding
    Issue(IssueArgs),
    /// Revoke one session's token, or all tokens
    Revoke(RevokeArgs),
}

/// The binding formats of SPEC §6.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// JSON: mcpServers (array), skillRoots, path
    Runtime,
    /// JSON for ACP session/new: mcpServers with headers as name/value pairs
    Acp,
    /// TOML table [mcp_servers.connector] for Codex
    Codex,
    /// JSON mcpServers object for Claude
    Claude,
    /// TOML table [mcp_servers.connector]
    Tutti,
}

/// `--tools` of `session issue` (SPEC §15).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ToolsArg {
    /// Every ready connector's tools
    All,
    /// Only tutti_search_tools and tutti_call_tool
    Search,
    /// search while the tool set holds more than 80 tools, else all
    Auto,
}

impl ToolsArg {
    /// The wire value.
    pub fn wire(self) -> tutti_proto::kernel::ToolsMode {
        use tutti_proto::kernel::ToolsMode;
        match self {
            Self::All => ToolsMode::All,
            Self::Search => ToolsMode::Search,
            Self::Auto => ToolsMode::Auto,
        }
    }
}

/// `--via` of `session issue` (SPEC §6, §18).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Via {
    /// The frontend's URL with a bearer token
    Http,
    /// A command that runs `tutti mcp-stdio`
    Stdio,
}

/// `--confirm` of `session issue` (SPEC §12).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ConfirmArg {
    /// Calls of high-risk tools
    High,
}

/// `--confirm-via` of `session issue` (SPEC §12).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ConfirmVia {
    /// The person, outside the agent: `tutti confirm allow|deny ID`, the console
    Person,
    /// The agent's own client, by elicitation (for hosts that show it to their person)
    Agent,
}

/// `--confirm LEVEL [--confirm-via CHANNEL,…]` of `session issue` and `mcp-stdio`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Args)]
pub struct ConfirmArgs {
    /// Have each call of a tool at this risk level confirmed before it is sent
    #[arg(long, value_enum, value_name = "LEVEL")]
    pub confirm: Option<ConfirmArg>,
    /// Who confirms: person (tutti confirm, the console; the default), agent (the agent's
    /// client, by elicitation), or both (first answer wins). Repeat it or give a comma list
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        value_name = "CHANNEL",
        requires = "confirm"
    )]
    pub confirm_via: Vec<ConfirmVia>,
}

impl ConfirmArgs {
    pub fn high(&self) -> bool {
        self.confirm == Some(ConfirmArg::High)
    }

    /// `(person, agent)`: the channels given (none given: the kernel asks the person).
    pub fn via(&self) -> (bool, bool) {
        (
            self.confirm_via.contains(&ConfirmVia::Person),
            self.confirm_via.contains(&ConfirmVia::Agent),
        )
    }

    /// The same options as command-line arguments (the stdio bridge's launch).
    pub fn argv(&self) -> Vec<String> {
        if !self.high() {
            return Vec::new();
        }
        let mut args = vec!["--confirm".to_owned(), "high".to_owned()];
        let names: Vec<&str> = [(ConfirmVia::Person, "person"), (ConfirmVia::Agent, "agent")]
            .into_iter()
            .filter(|(via, _)| self.confirm_via.contains(via))
            .map(|(_, name)| name)
            .collect();
        if !names.is_empty() {
            args.extend(["--confirm-via".to_owned(), names.join(",")]);
        }
        args
    }
}

#[derive(Debug, Args)]
pub struct IssueArgs {
    /// Workspace the session belongs to: a name of your choice, usually the project directory
    /// the agent works in (a path is used as given; one that does not exist gets a warning).
    /// The audit log, the console and `session revoke` name sessions by workspace and session
    #[arg(long, value_name = "W")]
    pub workspace: String,
    /// Session id
    #[arg(long, value_name = "S")]
    pub session: String,
    /// Output format
    #[arg(long, value_enum, default_value_t = Format::Runtime)]
    pub format: Format,
    /// What the session's tools/list holds: every tool, or two tools to search and call
    /// them (auto: search above 80 tools)
    #[arg(long, value_enum, default_value_t = ToolsArg::All)]
    pub tools: ToolsArg,
    #[command(flatten)]
    pub confirm: ConfirmArgs,
    /// The agent's ACP initialize response (JSON); bind only if it supports MCP over HTTP
    #[arg(long, value_name = "FILE")]
    pub acp_initialize: Option<PathBuf>,
    /// Merge the table into DIR/config.toml (formats codex, tutti)
    #[arg(long, value_name = "DIR")]
    pub codex_home: Option<PathBuf>,
    /// How the agent reaches the runtime: a URL and a token, or a command that runs the
    /// stdio bridge (`tutti mcp-stdio`; no token is issued and the entry survives restarts)
    #[arg(long, value_enum, default_value_t = Via::Http)]
    pub via: Via,
    /// The binding is JSON already (formats runtime, acp, claude); accepted for scripts that
    /// pass --json to every command
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("target").required(true).args(["workspace", "all"])))]
pub struct RevokeArgs {
    /// Workspace of the session to revoke
    #[arg(long, value_name = "W", requires = "session")]
    pub workspace: Option<String>,
    /// Session id to revoke
    #[arg(long, value_name = "S", requires = "workspace")]
    pub session: Option<String>,
    /// Revoke every session token
    #[arg(long, conflicts_with_all = ["workspace", "session"])]
    pub all: bool,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum ServiceCommand {
    /// Write (or print) the service definition for the kernel
    Install(ServiceInstallArgs),
    /// Stop and remove the service definition
    Uninstall(ServiceScope),
    /// Show whether the service is installed and whether a kernel answers
    Status(ServiceStatusArgs),
}

#[derive(Debug, Args)]
pub struct ServiceInstallArgs {
    /// A per-user service (systemd --user) instead of a system-wide one
    #[arg(long)]
    pub user: bool,
    /// Print the definition to stdout and write nothing
    #[arg(long)]
    pub print: bool,
    /// Also load and start it now (runs systemctl / launchctl / sc.exe)
    #[arg(long, conflicts_with = "print")]
    pub enable: bool,
    /// Render for another platform (with --print)
    #[arg(long, value_enum, hide = true)]
    pub platform: Option<crate::service::Platform>,
}

#[derive(Debug, Args)]
pub struct ServiceScope {
    /// The per-user service (systemd --user)
    #[arg(long)]
    pub user: bool,
}

#[derive(Debug, Args)]
pub struct ServiceStatusArgs {
    /// The per-user service (systemd --user)
    #[arg(long)]
    pub user: bool,
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;
    use clap::error::ErrorKind;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("tutti").chain(args.iter().copied()))
    }

    #[test]
    fn clap_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    #[test]
    fn removed_connector_subcommands_are_unrecognized() {
        for sub in ["capabilities", "skills", "skill", "invoke"] {
            let err = parse(&["connector", sub]).err().map(|e| e.kind());
            assert_eq!(err, Some(ErrorKind::InvalidSubcommand), "{sub}");
        }
        let err = parse(&["connector", "skill", "read", "x"])
            .err()
            .map(|e| e.kind());
        assert_eq!(err, Some(ErrorKind::InvalidSubcommand));
    }

    #[test]
    fn removed_subcommands_appear_in_no_help() {
        let mut cmd = Cli::command();
        let mut helps = vec![cmd.render_long_help().to_string()];
        for sub in cmd.get_subcommands_mut() {
            helps.push(sub.render_long_help().to_string());
            for subsub in sub.get_subcommands_mut() {
                helps.push(subsub.render_long_help().to_string());
            }
        }
        for help in helps {
            for word in ["capabilities", "invoke", "skill read"] {
                assert!(!help.contains(word), "help mentions {word}: {help}");
            }
        }
    }

    #[test]
    fn state_dir_is_global() {
        let cli = parse(&["status", "--state-dir", "/s", "--json"]).ok();
        let cli = cli.map(|c| {
            (
                c.state_dir,
                matches!(c.command, Command::Status(StatusArgs { json: true, .. })),
            )
        });
        assert_eq!(cli, Some((Some(PathBuf::from("/s")), true)));
        let cli = parse(&["--state-dir", "/t", "connector", "available"]).ok();
        assert_eq!(cli.and_then(|c| c.state_dir), Some(PathBuf::from("/t")));
    }

    #[test]
    fn install_collects_repeated_allow_command() {
        let cli = parse(&[
            "connector",
            "install",
            "rel",
            "--yes",
            "--allow-command",
            "node",
            "--allow-command",
            "uvx",
        ])
        .ok();
        match cli.map(|c| c.command) {
            Some(Command::Connector(ConnectorCommand::Install(a))) => {
                assert_eq!(a.source, "rel");
                assert!(a.yes);
                assert!(!a.json);
                assert_eq!(a.allow_commands, ["node", "uvx"]);
            }
            other => panic!("unexpected parse: {other:?}"),
        }
    }

    #[test]
    fn connect_takes_sources_or_none() {
        // No source: reconnects a connector that declares no secrets (after `disconnect`).
        let bare = parse(&["connector", "connect", "gh"]).ok();
        assert!(
            matches!(&bare, Some(Cli { command: Command::Connector(ConnectorCommand::Connect(a)), .. })
                if a.key == "gh" && a.from_env.is_empty() && a.stdin.is_empty()),
            "{bare:?}"
        );
        let cli = parse(&[
            "connector",
            "connect",
            "gh",
            "--from-env",
            "A",
            "--stdin",
            "B",
            "--stdin",
            "C",
        ])
        .ok();
        match cli.map(|c| c.command) {
            Some(Command::Connector(ConnectorCommand::Connect(a))) => {
                assert_eq!(a.key, "gh");
                assert_eq!(a.from_env, ["A"]);
                assert_eq!(a.stdin, ["B", "C"]);
            }
            other => panic!("unexpected parse: {other:?}"),
        }
    }

    #[test]
    fn issue_defaults_to_runtime_and_takes_every_format() {
        let cli = parse(&["session", "issue", "--workspace", "w", "--session", "s"]).ok();
        match cli.map(|c| c.command) {
            Some(Command::Session(SessionCommand::Issue(a))) => {
                assert_eq!(a.format, Format::Runtime);
            }
            other => panic!("unexpected parse: {other:?}"),
        }
        for (name, want) in [
            ("runtime", Format::Runtime),
            ("acp", Format::Acp),
            ("codex", Format::Codex),
            ("claude", Format::Claude),
            ("tutti", Format::Tutti),
        ] {
            let cli = parse(&[
                "session",
                "issue",
                "--workspace",
                "w",
                "--session",
                "s",
                "--format",
                name,
            ])
            .ok();
            match cli.map(|c| c.command) {
                Some(Command::Session(SessionCommand::Issue(a))) => assert_eq!(a.format, want),
                other => panic!("unexpected parse: {other:?}"),
            }
        }
        let err = parse(&["session", "issue", "--workspace", "w"])
            .err()
            .map(|e| e.kind());
        assert_eq!(err, Some(ErrorKind::MissingRequiredArgument));
        let err = parse(&[
            "session",
            "issue",
            "--workspace",
            "w",
            "--session",
            "s",
            "--format",
            "yaml",
        ])
        .err()
        .map(|e| e.kind());
        assert_eq!(err, Some(ErrorKind::InvalidValue));
    }

    #[test]
    fn revoke_takes_a_session_or_all_but_not_both() {
        assert!(parse(&["session", "revoke", "--all"]).is_ok());
        assert!(parse(&["session", "revoke", "--workspace", "w", "--session", "s"]).is_ok());
        assert!(parse(&["session", "revoke"]).is_err());
        assert!(parse(&["session", "revoke", "--workspace", "w"]).is_err());
        assert!(parse(&["session", "revoke", "--session", "s"]).is_err());
        assert!(
            parse(&[
                "session",
                "revoke",
                "--all",
                "--workspace",
                "w",
                "--session",
                "s"
            ])
            .is_err()
        );
    }

    #[test]
    fn service_commands_parse() {
        match parse(&[
            "service",
            "install",
            "--user",
            "--print",
            "--platform",
            "macos",
        ])
        .ok()
        .map(|c| c.command)
        {
            Some(Command::Service(ServiceCommand::Install(a))) => {
                assert!(a.user && a.print && !a.enable);
                assert_eq!(a.platform, Some(crate::service::Platform::Macos));
            }
            other => panic!("unexpected parse: {other:?}"),
        }
        assert!(parse(&["service", "install", "--print", "--enable"]).is_err());
        assert!(parse(&["service", "uninstall", "--user"]).is_ok());
        assert!(parse(&["service", "status", "--user", "--json"]).is_ok());
        let help = Cli::command()
            .find_subcommand_mut("service")
            .and_then(|s| s.find_subcommand_mut("install"))
            .map(|c| c.render_long_help().to_string())
            .unwrap_or_default();
        assert!(help.contains("--print"), "{help}");
        assert!(!help.contains("--platform"), "{help}");
    }

    #[test]
    fn console_help_names_one_default_for_port() {
        let help = Cli::command()
            .find_subcommand_mut("console")
            .map(|c| c.render_long_help().to_string())
            .unwrap_or_default();
        assert_eq!(help.matches("[default:").count(), 1, "{help}");
        assert!(help.contains("[default: a free port]"), "{help}");
    }

    #[test]
    fn down_parses_and_explains_itself() {
        assert!(matches!(
            parse(&["down"]).ok().map(|c| c.command),
            Some(Command::Down)
        ));
        let help = Cli::command().render_long_help().to_string();
        assert!(help.contains("down"), "{help}");
    }

    #[test]
    fn up_takes_demo() {
        match parse(&["up", "--demo"]).ok().map(|c| c.command) {
            Some(Command::Up(UpArgs { demo: true })) => {}
            other => panic!("unexpected parse: {other:?}"),
        }
    }
}
