//! Many clients at once: 64 consumers of four jobs, each job its own client reading its own
//! dataset with a different read policy, on 8 servers. Every job gets every byte once
//! (digest), and no server's memory grows past a bound while they all run.

mod common;

use common::{create, start};
use ganges_client::scan::{ReadOptions, open_scan};
use ganges_core::datagen::Generator;
use ganges_core::digest::Digest;
use ganges_core::ids::NodeId;
use ganges_core::route::ReadPolicyKind;
use ganges_core::shape::Partition;
use std::sync::Arc;

const SERVERS: u32 = 8;
const CONSUMERS_PER_JOB: u64 = 16;
/// A server's peak resident memory may not pass this while 64 consumers read.
const RSS_BOUND: u64 = 64 << 20;

async fn peak_rss(client: &ganges_client::Client) -> Vec<u64> {
    let mut out = vec![];
    for n in 0..SERVERS {
        out.push(common::stats(client, NodeId(n)).await.peak_rss_bytes);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_consumers_of_four_jobs_get_every_byte_and_server_memory_stays_bounded() {
    let t = start(SERVERS, None);
    let admin = t.client().await;
    let policies = [ReadPolicyKind::Static, ReadPolicyKind::Gd, ReadPolicyKind::GdRr, ReadPolicyKind::GdPlan];
    let mut manifests = vec![];
    for j in 0..policies.len() {
        let g = Generator::Random { seed: j as u64 };
        let m = create(&admin, &format!("job{j}"), vec![8 << 20; SERVERS as usize], 256 << 10, 2, g).await;
        manifests.push(Arc::new(m));
    }
    let before = peak_rss(&admin).await;
    let mut jobs = tokio::task::JoinSet::new();
    for (m, policy) in manifests.iter().cloned().zip(policies) {
        // Each job is a client of its own, as a separate program would be.
        let client = t.client().await;
        jobs.spawn(async move {
            let total = m.total_bytes();
            let each = total / CONSUMERS_PER_JOB;
            let parts = (0..CONSUMERS_PER_JOB).map(|i| Partition { offset: i * each, len: each }).collect();
            let streams = open_scan(&client, &m, Some(parts), ReadOptions::new(policy)).unwrap();
            let mut consumers = tokio::task::JoinSet::new();
            for mut s in streams {
                consumers.spawn(async move {
                    while s.next().await.expect("the read completes").is_some() {}
                    s.close().digest
                });
            }
            let mut digest = Digest::default();
            while let Some(d) = consumers.join_next().await {
                digest.merge(d.unwrap());
            }
            (policy, digest == m.digest)
        });
    }
    while let Some(done) = jobs.join_next().await {
        let (policy, whole) = done.unwrap();
        assert!(whole, "{policy}: the job's digest is the dataset's");
    }
    let after = peak_rss(&admin).await;
    eprintln!("servers' peak RSS before, MiB: {:?}", before.iter().map(|b| b >> 20).collect::<Vec<_>>());
    eprintln!("servers' peak RSS after 64 consumers, MiB: {:?}", after.iter().map(|b| b >> 20).collect::<Vec<_>>());
    for (n, peak) in after.iter().enumerate() {
        assert!(*peak < RSS_BOUND, "node{n} reached {} MiB", peak >> 20);
    }
}
