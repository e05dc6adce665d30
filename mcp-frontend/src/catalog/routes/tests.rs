//! The route table's unit tests.

use super::*;
use tutti_proto::kernel::{RouteSnapshot, RoutedTool, RuntimeShutdown};

fn tool(local: &str, upstream: &str, def: Value) -> RoutedTool {
    RoutedTool {
        name: local.into(),
        upstream_name: upstream.into(),
        definition_json: def.to_string(),
        risk: "low".into(),
    }
}

fn route(key: &str, generation: u64, tools: Vec<RoutedTool>) -> ConnectorRoute {
    ConnectorRoute {
        key: key.into(),
        name: format!("{key} name"),
        generation,
        worker_endpoint: format!("/run/w-{key}-{generation}.sock"),
        call_timeout_ms: 0,
        tools,
        has_cli: false,
        has_mcp: true,
        ..Default::default()
    }
}

fn ev(revision: u64, event: route_event::Event) -> RouteEvent {
    RouteEvent {
        revision,
        event: Some(event),
    }
}

/// The tool as a 2025-06-18 client sees it.
fn projected(tool: &Tool) -> Value {
    projected_for(tool, Revision::V2025_06_18)
}

fn projected_for(tool: &Tool, revision: Revision) -> Value {
    serde_json::from_str(tool.projected[revision.index()].get()).expect("projected JSON")
}

fn page_json(page: &Page) -> Value {
    serde_json::to_value(page).expect("page JSON")
}

fn names(table: &RouteTable) -> Vec<String> {
    table.tools.iter().map(|t| t.name.clone()).collect()
}

fn echo(key: &str) -> RoutedTool {
    tool(
        &format!("{key}_echo"),
        "echo",
        json!({"name":"echo","inputSchema":{"type":"object"}}),
    )
}

#[test]
fn snapshot_projects_and_sorts() {
    let mut s = RouteState::new();
    let effect = s.apply(ev(
        1,
        route_event::Event::Snapshot(RouteSnapshot {
            connectors: vec![
                route(
                    "zeta",
                    7,
                    vec![tool(
                        "zeta_b",
                        "b",
                        json!({"name":"b","description":"","title":"B","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true},"icons":[]}),
                    )],
                ),
                route(
                    "alpha",
                    3,
                    vec![tool(
                        "alpha_a",
                        "a",
                        json!({"name":"a","description":"does a","inputSchema":{"type":"object","properties":{"x":{"type":"string"}}},"outputSchema":{"type":"object"}}),
                    )],
                ),
            ],
        }),
    ));
    assert_eq!(
        effect,
        Effect::Routes {
            tools_changed: true
        }
    );
    let t = s.table();
    assert_eq!(names(&t), vec!["alpha_a", "zeta_b"]);
    assert_eq!(
        projected(&t.tools[1]),
        json!({"name":"zeta_b","title":"B","description":"zeta name: b","inputSchema":{"type":"object"},
               "annotations":{"readOnlyHint":true},
               "_meta":{"tutti/connector":"zeta","tutti/upstreamName":"b","tutti/risk":"low"}})
    );
    assert_eq!(projected(&t.tools[0])["description"], "does a");
    assert_eq!(
        projected(&t.tools[0])["outputSchema"],
        json!({"type":"object"})
    );
    assert_eq!(t.tools[0].connector.timeout_ms, DEFAULT_CALL_TIMEOUT_MS);
    // Revisions that see the same fields share one projection.
    let [a, b, c] = &t.tools[0].projected;
    assert!(Arc::ptr_eq(a, b) && Arc::ptr_eq(b, c));
    let [a, b, c] = &t.tools[1].projected;
    assert!(!Arc::ptr_eq(a, b) && Arc::ptr_eq(b, c));
}

/// Every field the upstream gave reaches the client whose revision defines it,
/// and `_meta` is the upstream's keys plus ours (ours alone under `tutti/`).
#[test]
fn definitions_pass_through_per_revision() {
    let mut s = RouteState::new();
    s.apply(ev(
        1,
        route_event::Event::Snapshot(RouteSnapshot {
            connectors: vec![route(
                "rich",
                1,
                vec![tool(
                    "rich_def",
                    "def",
                    json!({"name":"def","title":"Rich","description":"d",
                           "inputSchema":{"type":"object","maximum":9007199254740993_u64},
                           "outputSchema":{"type":"object"},
                           "annotations":{"readOnlyHint":true,"vendorHint":1},
                           "icons":[{"src":"https://x/i.png","mimeType":"image/png","sizes":["48x48"]}],
                           "execution":{"taskSupport":"required"},
                           "vendorField":true,
                           "_meta":{"ui/resourceUri":"ui://rich/app","openai/outputTemplate":"ui://t",
                                    "tutti/risk":"none","tutti/other":"spoof"}}),
                )],
            )],
        }),
    ));
    let t = s.table();
    let tool = &t.tools[0];
    let meta = json!({"ui/resourceUri":"ui://rich/app","openai/outputTemplate":"ui://t",
                      "tutti/connector":"rich","tutti/upstreamName":"def","tutti/risk":"low"});
    let base = json!({"name":"rich_def","title":"Rich","description":"d",
                      "inputSchema":{"type":"object","maximum":9007199254740993_u64},
                      "outputSchema":{"type":"object"},
                      "annotations":{"readOnlyHint":true,"vendorHint":1},"_meta":meta});
    let with = |extra: Value| {
        let mut v = base.clone();
        if let (Some(v), Value::Object(extra)) = (v.as_object_mut(), extra) {
            v.extend(extra);
        }
        v
    };
    let icons = json!([{"src":"https://x/i.png","mimeType":"image/png","sizes":["48x48"]}]);
    assert_eq!(projected_for(tool, Revision::V2025_06_18), base);
    assert_eq!(
        projected_for(tool, Revision::V2025_11_25),
        with(json!({"icons": icons, "execution": {"taskSupport":"required"}}))
    );
    assert_eq!(
        projected_for(tool, Revision::V2026_07_28),
        with(json!({"icons": icons}))
    );
    // A page is written in the revision it was asked for.
    let (page, _) = t.page(None, 10, Revision::V2025_11_25).expect("page");
    assert_eq!(
        page_json(&page)[0]["execution"],
        json!({"taskSupport":"required"})
    );
    assert_eq!(
        page.json_len(),
        serde_json::to_string(&page).expect("page").len()
    );
}

#[test]
fn upsert_replaces_a_connector_and_detects_list_changes() {
    let mut s = RouteState::new();
    s.apply(ev(
        1,
        route_event::Event::Snapshot(RouteSnapshot {
            connectors: vec![route("a", 1, vec![echo("a")])],
        }),
    ));
    // Same tools, new generation: routes change, the visible list does not.
    let effect = s.apply(ev(
        2,
        route_event::Event::Upsert(route("a", 2, vec![echo("a")])),
    ));
    assert_eq!(
        effect,
        Effect::Routes {
            tools_changed: false
        }
    );
    let t = s.table();
    assert_eq!(t.list_revision, 1);
    let Lookup::Found(found) = t.lookup("a_echo") else {
        panic!("a_echo routable");
    };
    assert_eq!(found.connector.generation, 2);
    // A new tool set: the list changed.
    let effect = s.apply(ev(
        3,
        route_event::Event::Upsert(route("a", 3, vec![echo("a"), tool("a_x", "x", json!({}))])),
    ));
    assert_eq!(
        effect,
        Effect::Routes {
            tools_changed: true
        }
    );
    assert_eq!(s.table().list_revision, 3);
    assert_eq!(names(&s.table()), vec!["a_echo", "a_x"]);
}

#[test]
fn removed_is_fenced_by_generation() {
    let mut s = RouteState::new();
    s.apply(ev(
        1,
        route_event::Event::Snapshot(RouteSnapshot {
            connectors: vec![
                route("a", 5, vec![echo("a")]),
                route("b", 1, vec![echo("b")]),
            ],
        }),
    ));
    let Lookup::Found(old) = s.table().lookup("a_echo") else {
        panic!("routable");
    };
    let mut fence = old.connector.fence.subscribe();
    // An older generation's removal leaves the live one alone.
    let effect = s.apply(ev(
        2,
        route_event::Event::Removed(ConnectorRemoved {
            key: "a".into(),
            generation: 4,
            reason: "crashed".into(),
            deliberate: false,
        }),
    ));
    assert_eq!(
        effect,
        Effect::Routes {
            tools_changed: false
        }
    );
    assert!(matches!(s.table().lookup("a_echo"), Lookup::Found(_)));
    assert!(!fence.borrow_and_update().is_fenced());
    // Removing generation 5 drops the connector and fires its fence.
    let effect = s.apply(ev(
        3,
        route_event::Event::Removed(ConnectorRemoved {
            key: "a".into(),
            generation: 5,
            reason: "uninstalled".into(),
            deliberate: true,
        }),
    ));
    assert_eq!(
        effect,
        Effect::Routes {
            tools_changed: true
        }
    );
    assert_eq!(
        *fence.borrow_and_update(),
        Fenced::Deliberate,
        "the kernel's own decision"
    );
    match s.table().lookup("a_echo") {
        Lookup::Gone(g) => assert_eq!(
            g,
            Gone {
                key: "a".into(),
                generation: 5
            }
        ),
        _ => panic!("a_echo must be remembered as gone"),
    }
    assert!(matches!(s.table().lookup("nope"), Lookup::Unknown));
    assert!(matches!(s.table().lookup("b_echo"), Lookup::Found(_)));
    // It comes back: no longer "gone".
    s.apply(ev(
        4,
        route_event::Event::Upsert(route("a", 6, vec![echo("a")])),
    ));
    assert!(matches!(s.table().lookup("a_echo"), Lookup::Found(_)));
}

#[test]
fn removal_fences_a_replaced_generation_still_in_flight() {
    let mut s = RouteState::new();
    s.apply(ev(
        1,
        route_event::Event::Upsert(route("a", 1, vec![echo("a")])),
    ));
    let Lookup::Found(old) = s.table().lookup("a_echo") else {
        panic!("routable");
    };
    let mut fence = old.connector.fence.subscribe();
    s.apply(ev(
        2,
        route_event::Event::Upsert(route("a", 2, vec![echo("a")])),
    ));
    assert!(!fence.borrow_and_update().is_fenced());
    s.apply(ev(
        3,
        route_event::Event::Removed(ConnectorRemoved {
            key: "a".into(),
            generation: 1,
            reason: "replaced".into(),
            deliberate: false,
        }),
    ));
    assert_eq!(*fence.borrow_and_update(), Fenced::Failed);
    let Lookup::Found(live) = s.table().lookup("a_echo") else {
        panic!("generation 2 stays routable");
    };
    assert_eq!(live.connector.generation, 2);
}

#[test]
fn session_and_shutdown_events() {
    let mut s = RouteState::new();
    let revoked = SessionsRevoked {
        all: true,
        workspace: String::new(),
        session: String::new(),
    };
    assert_eq!(
        s.apply(ev(1, route_event::Event::SessionsRevoked(revoked.clone()))),
        Effect::Revoked(revoked)
    );
    assert_eq!(
        s.apply(ev(2, route_event::Event::Shutdown(RuntimeShutdown {}))),
        Effect::Shutdown
    );
    assert_eq!(
        s.apply(ev(2, route_event::Event::Shutdown(RuntimeShutdown {}))),
        Effect::Nothing
    );
}

#[test]
fn pagination_and_cursors() {
    let mut s = RouteState::new();
    let tools = (0..5)
        .map(|i| tool(&format!("a_t{i}"), &format!("t{i}"), json!({})))
        .collect();
    s.apply(ev(9, route_event::Event::Upsert(route("a", 1, tools))));
    let t = s.table();
    let (page, next) = t.page(None, 2, Revision::V2025_06_18).expect("first page");
    assert_eq!(page.len(), 2);
    let next = next.expect("more pages");
    let (page, next) = t
        .page(Some(&next), 2, Revision::V2025_06_18)
        .expect("second page");
    assert_eq!(page_json(&page)[0]["name"], "a_t2");
    assert_eq!(page_json(&page)[1], projected(&t.tools[3]));
    assert_eq!(
        page.json_len(),
        serde_json::to_string(&page).expect("json").len()
    );
    let (page, next) = t
        .page(next.as_deref(), 2, Revision::V2025_06_18)
        .expect("third page");
    assert_eq!(page.len(), 1);
    assert!(next.is_none());
    assert_eq!(
        t.page(Some("%%%"), 2, Revision::V2025_06_18).err(),
        Some(CursorError::Malformed)
    );
    assert_eq!(
        t.page(Some(&encode_cursor(9, 99)), 2, Revision::V2025_06_18)
            .err(),
        Some(CursorError::Malformed)
    );
    assert_eq!(
        t.page(Some(&encode_cursor(8, 2)), 2, Revision::V2025_06_18)
            .err(),
        Some(CursorError::Stale)
    );
}

#[test]
fn broken_tools_are_skipped() {
    let mut s = RouteState::new();
    let mut bad = tool("a_bad", "bad", json!({}));
    bad.definition_json = "not json".into();
    let remote = tool(
        "a_remote",
        "remote",
        json!({"inputSchema":{"$ref":"https://example.com/s.json"}}),
    );
    s.apply(ev(
        1,
        route_event::Event::Upsert(route("a", 1, vec![bad, remote, echo("a")])),
    ));
    assert_eq!(names(&s.table()), vec!["a_echo"]);
}
