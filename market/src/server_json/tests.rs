use super::*;

fn doc(extra: Value) -> ServerJson {
    let mut base = json!({
        "$schema": "https://static.modelcontextprotocol.io/schemas/2025-12-11/server.schema.json",
        "name": "io.github.example/Weather_Server",
        "description": "Weather forecasts",
        "version": "1.2.0",
        "somethingNew": {"tolerated": true},
    });
    if let (Value::Object(b), Value::Object(e)) = (&mut base, extra) {
        b.extend(e);
    }
    parse(base.to_string().as_bytes()).unwrap_or_else(|e| panic!("{e}"))
}

fn set(pairs: &[(&str, &str)]) -> Choices {
    Choices {
        set: pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        ..Default::default()
    }
}

fn pinned(command: &str, args: &[&str]) -> Pinned {
    Pinned {
        command: command.into(),
        args: args.iter().map(|a| (*a).to_owned()).collect(),
        env: BTreeMap::new(),
        artefacts: Vec::new(),
        interpreter: None,
        scripts: Vec::new(),
        version: "1.0.0".into(),
        secrets: Vec::new(),
    }
}

fn err(d: &ServerJson, c: &Choices) -> String {
    match plan(d, c) {
        Ok(p) => panic!("expected an error, got {p:?}"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn the_first_supported_package_becomes_the_release() {
    let d = doc(json!({"packages": [
        {"registryType": "nuget", "identifier": "Weather"},
        {"registryType": "npm", "identifier": "@example/weather", "version": "1.2.0",
         "transport": {"type": "stdio"},
         "runtimeArguments": [{"type": "named", "name": "-y"}],
         "packageArguments": [
            {"type": "positional", "value": "--stdio"},
            {"type": "named", "name": "--units", "valueHint": "units", "default": "metric"},
            {"type": "positional", "valueHint": "city", "value": "{city}",
             "variables": {"city": {"isRequired": true}}}],
         "environmentVariables": [
            {"name": "WEATHER_API_KEY", "isSecret": true, "isRequired": true},
            {"name": "LOG_LEVEL", "default": "warn"},
            {"name": "REGION", "isRequired": true}]}]}));
    let c = set(&[("city", "Bern"), ("REGION", "eu")]);
    let p = plan(&d, &c).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        p.package,
        Some(PackageRef::Npm {
            name: "@example/weather".into(),
            version: "1.2.0".into()
        })
    );
    assert_eq!(p.package_args, ["--stdio", "--units", "metric", "Bern"]);
    assert!(
        p.runtime_args.is_empty(),
        "npx options do not apply to a pinned launch"
    );
    assert_eq!(p.secret_names(), ["WEATHER_API_KEY"]);
    let m = compose(
        &p,
        Some(&pinned("node", &["${release}/node_modules/w/index.js"])),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        m,
        json!({"key": "weather-server", "name": "io.github.example/Weather_Server",
            "description": "Weather forecasts", "version": "1.2.0",
            "mcp": {"transport": "stdio", "cwd": "${release}", "command": "node",
                "args": ["${release}/node_modules/w/index.js", "--stdio", "--units", "metric", "Bern"],
                "env": {"LOG_LEVEL": "warn", "REGION": "eu"},
                "secrets": ["WEATHER_API_KEY"]}})
    );
}

#[test]
fn missing_required_inputs_name_the_set_flag() {
    let env = doc(
        json!({"packages": [{"registryType": "pypi", "identifier": "w",
        "environmentVariables": [{"name": "REGION", "isRequired": true}]}]}),
    );
    assert_eq!(
        err(&env, &Choices::default()),
        "server.json: environment variable REGION needs a value: give it with --set REGION=…"
    );
    let var = doc(
        json!({"packages": [{"registryType": "pypi", "identifier": "w",
        "packageArguments": [{"type": "named", "name": "--dir", "value": "{root}/data",
            "variables": {"root": {"isRequired": true}}}]}]}),
    );
    assert!(err(&var, &Choices::default()).ends_with("--set root=…"));
    let p = plan(&var, &set(&[("root", "/srv")])).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(p.package_args, ["--dir", "/srv/data"]);
    assert_eq!(
        p.package,
        Some(PackageRef::Pypi {
            name: "w".into(),
            version: "1.2.0".into()
        }),
        "without a package version the document's version is the package's"
    );
}

#[test]
fn unsupported_types_are_refused_naming_the_type() {
    for kind in ["nuget", "cargo", "go"] {
        let d = doc(json!({"packages": [{"registryType": kind, "identifier": "x"}]}));
        assert_eq!(
            err(&d, &Choices::default()),
            format!(
                "server.json: package type \"{kind}\" is not supported (npm, pypi, mcpb and oci are); choose another entry with --package N or --remote N"
            )
        );
    }
}

#[test]
fn remotes_map_to_http_with_secret_headers_as_auth() {
    let d = doc(
        json!({"packages": [{"registryType": "cargo", "identifier": "x"}],
        "remotes": [
        {"type": "streamable-http", "url": "https://{tenant}.example/mcp",
         "variables": {"tenant": {"default": "eu"}}},
        {"type": "streamable-http", "url": "https://x.example/mcp",
         "headers": [{"name": "Authorization", "value": "Bearer {api_key}", "isSecret": true,
            "variables": {"api_key": {"isSecret": true}}}]},
        {"type": "streamable-http", "url": "https://y.example/mcp",
         "headers": [{"name": "X-Api-Key", "isSecret": true, "isRequired": true}]},
        {"type": "sse", "url": "https://z.example/sse"}]}),
    );
    let mut first = plan(&d, &Choices::default()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        first.package, None,
        "an unsupported package falls back to remotes[0]"
    );
    assert_eq!(first.remote_url(), Some("https://eu.example/mcp"));
    first.use_oauth();
    assert_eq!(first.manifest["mcp"]["auth"], json!({"kind": "oauth"}));
    let pick = |n| Choices {
        remote: Some(n),
        ..Default::default()
    };
    let bearer = plan(&d, &pick(1)).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        bearer.manifest["mcp"]["auth"],
        json!({"kind": "bearer", "secret": "API_KEY"})
    );
    let mut header = plan(&d, &pick(2)).unwrap_or_else(|e| panic!("{e}"));
    header.use_oauth();
    assert_eq!(
        header.manifest["mcp"]["auth"],
        json!({"kind": "header", "header": "X-Api-Key", "secret": "X_API_KEY"}),
        "a secret header is the auth; no OAuth over it"
    );
    assert_eq!(header.secret_names(), ["X_API_KEY"]);
    assert!(err(&d, &pick(3)).contains("remote transport \"sse\" is not supported"));
    assert!(err(&d, &pick(9)).contains("--remote 9: the document has 4 remotes"));
    assert!(
        err(
            &d,
            &Choices {
                package: Some(0),
                ..Default::default()
            }
        )
        .contains("\"cargo\"")
    );
}

#[test]
fn keys_come_from_the_last_segment_or_key() {
    for (name, key) in [
        (
            "io.github.modelcontextprotocol/server-everything",
            "server-everything",
        ),
        ("io.github.x/Mcp_Server.Time", "mcp-server-time"),
        ("a/9lives", "lives"),
        ("a/", ""),
        (
            "x/abcdefghijklmnopqrstuvwxyz-long",
            "abcdefghijklmnopqrstuvwx",
        ),
    ] {
        assert_eq!(
            normalise_key(name.rsplit('/').next().unwrap_or_default()),
            key,
            "{name}"
        );
    }
    let d = doc(json!({"remotes": [{"type": "streamable-http", "url": "https://x.example"}]}));
    let chosen = Choices {
        key: Some("wx".into()),
        ..Default::default()
    };
    assert_eq!(
        plan(&d, &chosen).map(|p| p.manifest["key"].clone()).ok(),
        Some(json!("wx"))
    );
    let bad = Choices {
        key: Some("Wx_1".into()),
        ..Default::default()
    };
    assert!(err(&d, &bad).starts_with("--key \"Wx_1\""));
}

#[test]
fn secrets_never_come_from_set_nor_go_on_argv() {
    let d = doc(
        json!({"packages": [{"registryType": "npm", "identifier": "w",
        "environmentVariables": [{"name": "TOKEN", "isSecret": true}]}]}),
    );
    let e = err(&d, &set(&[("TOKEN", "s3cr3t-value")]));
    assert!(
        e.contains("--from-env TOKEN") && !e.contains("s3cr3t"),
        "{e}"
    );
    let argv = doc(
        json!({"packages": [{"registryType": "npm", "identifier": "w",
        "packageArguments": [{"type": "named", "name": "--token", "isSecret": true}]}]}),
    );
    assert!(err(&argv, &Choices::default()).contains("never go on a command line"));
    let inside = doc(
        json!({"packages": [{"registryType": "npm", "identifier": "w",
        "packageArguments": [{"type": "named", "name": "--url", "value": "https://{token}@x",
            "variables": {"token": {"isSecret": true}}}]}]}),
    );
    let e = err(&inside, &set(&[("token", "s3cr3t-value")]));
    assert!(
        e.contains("variable token is a secret") && !e.contains("s3cr3t"),
        "{e}"
    );
}

#[test]
fn oci_runtime_arguments_go_before_the_image() {
    let d = doc(
        json!({"packages": [{"registryType": "oci", "identifier": "ghcr.io/x/w",
        "version": "1.2.0",
        "runtimeArguments": [{"type": "named", "name": "-e", "value": "MODE=ro"}],
        "packageArguments": [{"type": "positional", "value": "serve"}]}]}),
    );
    let p = plan(&d, &Choices::default()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        p.package,
        Some(PackageRef::Oci {
            image: "ghcr.io/x/w:1.2.0".into()
        })
    );
    let m = compose(
        &p,
        Some(&pinned("docker", &["run", "--rm", "-i", "img@sha256:ab"])),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        m["mcp"]["args"],
        json!([
            "run",
            "--rm",
            "-i",
            "-e",
            "MODE=ro",
            "img@sha256:ab",
            "serve"
        ])
    );
    assert!(
        compose(&p, None).is_err(),
        "a package needs its pinned launch"
    );
}

#[test]
fn documents_without_anything_to_run_or_a_name_are_refused() {
    assert!(err(&doc(json!({})), &Choices::default()).contains("nothing to run"));
    assert!(parse(br#"{"version": "1"}"#).is_err());
}

#[test]
fn an_imported_launch_adds_its_arguments_env_and_secret_names_around_the_pinned_one() {
    let oci = PackageRef::Oci {
        image: "ghcr.io/x/w:2".into(),
    };
    let mut p =
        crate::source::package_plan(&oci, &Choices::default()).unwrap_or_else(|e| panic!("{e}"));
    let env = BTreeMap::from([("LOG_LEVEL".to_owned(), "warn".to_owned())]);
    p.extend_launch(
        &["stdio".into()],
        &["-e".into(), "GITHUB_TOKEN".into()],
        &env,
        &["GITHUB_TOKEN".into()],
    );
    let m = compose(&p, Some(&pinned("docker", &["run", "-i", "img@sha256:ab"])))
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        m["mcp"]["args"],
        json!(["run", "-i", "-e", "GITHUB_TOKEN", "img@sha256:ab", "stdio"])
    );
    assert_eq!(m["mcp"]["env"], json!({"LOG_LEVEL": "warn"}));
    assert_eq!(m["mcp"]["secrets"], json!(["GITHUB_TOKEN"]));
}

#[test]
fn a_bundle_is_named_by_an_https_url_never_a_local_path() {
    let bundle = |identifier: &str| {
        doc(
            json!({"packages": [{"registryType": "mcpb", "identifier": identifier,
            "fileSha256": "ab".repeat(32)}]}),
        )
    };
    let remote = plan(&bundle("https://x.example/w.mcpb"), &Choices::default());
    assert!(
        matches!(remote.map(|p| p.package), Ok(Some(PackageRef::Mcpb { .. }))),
        "an https bundle plans"
    );
    for local in [
        "/home/me/.ssh/id_ed25519",
        "../w.mcpb",
        "http://x.example/w.mcpb",
    ] {
        assert_eq!(
            err(&bundle(local), &Choices::default()),
            format!(
                "server.json: mcpb package {local:?}: the identifier must be an https:// URL with fileSha256; install a local bundle as ./x.mcpb"
            )
        );
    }
}
