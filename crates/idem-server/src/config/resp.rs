//! `[resp]`: the Redis protocol's listener (contract §13) and the namespace whose claims its keys
//! are. Absent: nothing listens.

use std::net::SocketAddr;

use idem_core::Namespace;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RespConfig {
    /// Where Redis clients connect (`127.0.0.1:6380`).
    #[serde(deserialize_with = "super::value::listen_addr")]
    pub listen: SocketAddr,
    /// The claims' namespace a Redis key lives in (default `redis`): `SET k v NX` claims `k` there,
    /// as `POST /v1/claims/redis` with the key as its one part would.
    #[serde(default = "default_namespace")]
    pub namespace: Namespace,
}

fn default_namespace() -> Namespace {
    Namespace::new("redis").expect("a valid name")
}

impl RespConfig {
    /// What would make the listener fail to start: the address of another listener.
    pub(super) fn mistakes(&self, others: &[(&str, SocketAddr)]) -> Vec<(String, String)> {
        others
            .iter()
            .filter(|(_, addr)| *addr == self.listen)
            .map(|(key, _)| ("resp.listen".to_owned(), format!("must differ from {key}")))
            .collect()
    }
}
