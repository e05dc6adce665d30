//! What `tutti-connector-<key>` runs: the live release's CLI entrypoint and the environment
//! it gets (its declared secrets and `TUTTI_CONNECTOR_KEY`), or why it cannot run now.

use tutti_proto::kernel as pb;

use crate::state::{Kernel, lock};

/// The shim's answer for `key`: `live: false` with the connector's status when nothing runs.
pub fn resolve(k: &Kernel, key: &str) -> pb::ResolveShimReply {
    let inner = lock(&k.inner);
    let status = inner
        .conns
        .get(key)
        .map(|c| c.life.status().as_str())
        .unwrap_or("not installed");
    let (Some(route), Some(live)) = (inner.table.live(key), inner.live_releases.get(key)) else {
        return pb::ResolveShimReply {
            live: false,
            status: status.into(),
            ..Default::default()
        };
    };
    let Some(cli) = (if route.has_cli {
        live.manifest.cli.as_ref()
    } else {
        None
    }) else {
        return pb::ResolveShimReply {
            live: false,
            status: "no cli interface".into(),
            ..Default::default()
        };
    };
    let stored = k.secrets.load(key);
    let mut env: std::collections::HashMap<String, String> = cli
        .secrets
        .iter()
        .filter_map(|n| stored.get(n).map(|v| (n.clone(), v.clone())))
        .collect();
    env.insert("TUTTI_CONNECTOR_KEY".into(), key.to_owned());
    pb::ResolveShimReply {
        live: true,
        status: status.into(),
        generation: route.generation,
        entrypoint: live
            .release_dir
            .join(&cli.entrypoint)
            .to_string_lossy()
            .into_owned(),
        env,
    }
}
