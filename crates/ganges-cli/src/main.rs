//! `ganges`: the command line. The arguments are in `args.rs`; this file dispatches them to
//! the library crates and the commands in `ganges_cli::commands`.

use clap::Parser;
use ganges_bench::scan::{self as bench, Access, LayoutChoice, Ratio, ScanBenchSpec};
use ganges_cli::commands::{self, CreateArgs, ModelLayoutArgs};
use ganges_cli::error::{CliError, CliResult, fail};
use ganges_client::cluster::{ClusterFile, default_cluster_path, default_local_root};
use ganges_client::dataset::Sizing;
use ganges_client::scan::ReadOptions;
use ganges_client::write::WriteSource;
use ganges_core::datagen::Generator;
use ganges_core::disk::{DiskParams, Fault};
use ganges_core::fault::FaultLayout;
use ganges_core::ids::NodeId;
use ganges_core::route::{PolicySettings, ReadPolicyKind};
use ganges_core::units::ByteSize;
use ganges_core::write::WritePolicyKind;
use ganges_harness::local::{self, LocalSpec};
use ganges_proto::manifest::DatasetName;
use ganges_sim::scenario::SimOptions;
use std::path::PathBuf;
use std::time::Duration;

mod args;

use args::*;
fn block_bytes(b: ByteSize) -> CliResult<u32> {
    u32::try_from(b.0).map_err(|_| CliError::Failed(format!("block size {b} is out of range: use 4KiB to 16MiB")))
}

fn name(s: &str) -> CliResult<DatasetName> {
    Ok(s.parse::<DatasetName>()?)
}

fn init_logging(default: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}

fn runtime() -> CliResult<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build()?)
}

fn binary() -> CliResult<PathBuf> {
    std::env::current_exe().map_err(|e| CliError::Failed(format!("finding the ganges binary: {e}")))
}

fn main() {
    let cli = Cli::parse();
    // Processes a harness started (servers, stresses, the supervisor) tie themselves to their
    // parent first: they die with it, or leave its session. Not a competing reader, which
    // inherits its server's environment and ties itself to the server (`--parent`).
    let started = matches!(
        cli.cmd,
        Cmd::Serve(_) | Cmd::Stress(_) | Cmd::Worker { .. } | Cmd::Local { cmd: LocalCmd::Supervise(_) }
    );
    if started && let Err(e) = ganges_harness::sys::apply_tie() {
        eprintln!("error: tying this process to its parent: {e}");
        std::process::exit(1);
    }
    let serving = matches!(cli.cmd, Cmd::Serve(_));
    init_logging(if serving { "info" } else { "warn" });
    if let Err(e) = run(cli) {
        eprintln!("error: {e}");
        std::process::exit(e.exit_code());
    }
}

fn run(cli: Cli) -> CliResult<()> {
    match cli.cmd {
        Cmd::Serve(a) => serve(a),
        Cmd::Local { cmd } => local_cmd(cmd),
        Cmd::Dataset { cmd } => runtime()?.block_on(async {
            let r = dataset_cmd(cmd).await;
            // Bad blocks a read met are repaired before the command exits (heal on read).
            ganges_client::repair::settle().await;
            r
        }),
        Cmd::Array { cmd } => runtime()?.block_on(array_cmd(cmd)),
        Cmd::Write(a) => {
            let source = match a.from {
                Some(path) => WriteSource::File(path),
                None => WriteSource::Generated(Generator::Random { seed: a.seed }),
            };
            let args = commands::WriteArgs {
                name: name(&a.name)?,
                writers: a.writers,
                policy: a.policy,
                total_bytes: a.size.map_or(0, |s| s.0),
                block_bytes: block_bytes(a.block_size)?,
                replicas: a.replicas.unwrap_or(a.policy.default_replicas()),
                window: a.window,
                source,
                complete: !a.no_complete,
                run_blocks: a.run_blocks,
                ceft: a.ceft.settings(),
                mirrored: a.layout.map_or(a.policy.default_mirrored(), |l| l == LayoutChoice::Mirrored),
            };
            runtime()?.block_on(async {
                commands::serve_client_metrics(a.metrics_listen.as_deref()).await?;
                commands::write(&a.cluster.path(), args).await
            })
        }
        Cmd::Run { cmd } => run_cmd(cmd, false),
        Cmd::Worker { cmd } => run_cmd(cmd, true),
        Cmd::Scan { name: n, policy, window, plot_progress, metrics_listen, settings, cluster } => {
            let opts = ReadOptions::new(policy).with_settings(settings.settings()?);
            let opts = window.map_or(opts, |w| opts.with_window(w));
            runtime()?.block_on(async {
                commands::serve_client_metrics(metrics_listen.as_deref()).await?;
                commands::scan(&cluster.path(), name(&n)?, opts, plot_progress.as_deref()).await
            })
        }
        Cmd::Dashboard { listen, live } => {
            runtime()?.block_on(commands::dashboard(&live.cluster.path(), &listen, live.interval.0))
        }
        Cmd::Top { live } => runtime()?.block_on(commands::top(&live.cluster.path(), live.interval.0)),
        Cmd::Fault { cmd } => runtime()?.block_on(async {
            match cmd {
                FaultCmd::Set {
                    node,
                    factor,
                    competing_share,
                    kernel_read_rate,
                    kernel_write_rate,
                    competing_reader,
                    link_rate,
                    link_delay,
                    cluster,
                } => {
                    let model = match (factor, competing_share) {
                        (Some(factor), None) => Some(Fault::Factor { factor }),
                        (None, Some(share)) => Some(Fault::Competing { share }),
                        _ => None,
                    };
                    let real = ganges_proto::control::RealFaults {
                        kernel_read_bytes_per_sec: kernel_read_rate.map(|r| r.0.round() as u64),
                        kernel_write_bytes_per_sec: kernel_write_rate.map(|r| r.0.round() as u64),
                        competing_reader,
                        competing_bytes_per_sec: None,
                        link_bytes_per_sec: link_rate.map(|r| r.0.round() as u64),
                        link_delay_us: link_delay.map(|d| d.0.as_micros() as u64),
                    };
                    if model.is_none() && real.is_none() {
                        return fail(
                            "give a fault: --factor or --competing-share (the disk model), or --kernel-read-rate, \
                             --kernel-write-rate, --competing-reader, --link-rate or --link-delay (real)",
                        );
                    }
                    commands::fault_set(&cluster.path(), &node, model, real).await
                }
                FaultCmd::Clear { node, cluster } => commands::fault_clear(&cluster.path(), node).await,
                FaultCmd::Show { cluster } => commands::fault_show(&cluster.path()).await,
            }
        }),
        Cmd::Model { cmd } => match cmd {
            ModelCmd::River { n, u_app, u_fault } => commands::model_river(n, u_app, u_fault),
            ModelCmd::Layout { nodes, replicas, fault, faults, fault_layout, seed, fragment_size, disk_rate } => {
                commands::model_layout(&ModelLayoutArgs {
                    nodes,
                    replicas,
                    fault: fault.fault(),
                    faults,
                    layout: fault_layout,
                    seed,
                    fragment_bytes: fragment_size.0,
                    rate_bytes_per_sec: disk_rate.0,
                })
            }
        },
        Cmd::Bench { cmd: BenchCmd::Scan(a) } => bench_scan(*a),
        Cmd::Bench { cmd: BenchCmd::Write(a) } => bench_write(*a),
        Cmd::Bench { cmd: BenchCmd::Array(a) } => bench_array(*a),
        Cmd::Bench {
            cmd:
                BenchCmd::Apps { nodes, per_disk, disk_rate, seek, slow, apps, fault_layout, repeat, quick, json, plot },
        } => {
            use ganges_bench::apps::{self as bench_apps, App};
            let (nodes, per_disk) = if quick { (8, 16 << 20) } else { (nodes, per_disk.0) };
            let slow = slow.unwrap_or_else(|| {
                let all = if quick { vec![0, 1, 4] } else { vec![0, 1, 2, 4, 8, 16] };
                all.into_iter().filter(|&s| s <= nodes).collect()
            });
            let apps = match apps {
                Some(v) => v.iter().map(|a| a.parse::<App>()).collect::<Result<Vec<_>, _>>()?,
                None => App::ALL.to_vec(),
            };
            let spec = bench_apps::AppsBenchSpec {
                nodes,
                per_disk,
                disk: DiskParams { rate_bytes_per_sec: disk_rate.0, seek: seek.0, queue_depth: 1 },
                slow,
                apps,
                fault_layout,
                repeat,
                binary: binary()?,
            };
            let report = bench_apps::run(&spec)?;
            print!("{}", bench_apps::render(&report));
            Ok(bench_apps::write_outputs(&report, json.as_ref(), plot.as_ref())?)
        }
        Cmd::Bench { cmd: BenchCmd::Transport { size, block_size, repeat, json } } => {
            let spec = ganges_bench::transport::TransportBenchSpec {
                bytes: size.0,
                block_bytes: block_bytes(block_size)?,
                repeat: repeat.max(1),
                binary: binary()?,
                json,
            };
            let report = ganges_bench::transport::run(&spec)?;
            print!("{}", ganges_bench::transport::render(&report));
            Ok(ganges_bench::util::write_json(&report, spec.json.as_ref())?)
        }
        Cmd::Bench {
            cmd: BenchCmd::Dashboard { nodes, disk_rate, fragment_size, viewers, interval, seconds, json },
        } => {
            let spec = ganges_bench::live::DashboardBenchSpec {
                nodes,
                disk: DiskParams {
                    rate_bytes_per_sec: disk_rate.0,
                    seek: std::time::Duration::from_millis(4),
                    queue_depth: 1,
                },
                fragment_bytes: fragment_size.0,
                viewers: viewers.max(1),
                interval: interval.0,
                seconds,
                binary: binary()?,
                json,
            };
            let report = ganges_bench::live::run(&spec)?;
            print!("{}", ganges_bench::live::render(&report));
            Ok(ganges_bench::util::write_json(&report, spec.json.as_ref())?)
        }
        Cmd::Demo(a) => demo(a),
        Cmd::Sim(a) => sim(a),
        Cmd::Stress(a) => {
            Ok(ganges_harness::stress::run(a.kind, &a.cgroup, a.threads, a.node_memory.0, a.leave.0, a.target)?)
        }
        Cmd::Cluster { cmd: ClusterCmd::Init { hosts, out, secret_file, data_dir, listen_any, tls } } => {
            commands::cluster_init(&commands::ClusterInit { hosts, out, secret_file, data_dir, listen_any, tls })
        }
        Cmd::Cluster { cmd: ClusterCmd::Status { cluster } } => {
            runtime()?.block_on(commands::cluster_status(&cluster.path()))
        }
        Cmd::Compete { file, share, parent, cgroup, rate } => {
            ganges_server::realfault::compete(&file, share, rate, parent, cgroup.as_deref())
                .map_err(|e| CliError::Failed(format!("competing reader on {}: {e}", file.display())))
        }
    }
}

fn serve(a: ServeArgs) -> CliResult<()> {
    let node = NodeId(a.node);
    let file = a.cluster.as_deref().map(ClusterFile::load).transpose()?;
    let entry = file.as_ref().map(|f| f.server(node).cloned()).transpose()?;
    // The other servers, for request handoff; local clusters send them once all are up.
    let peers = file.as_ref().map_or(vec![], |f| f.peers().into_iter().filter(|p| p.node != node).collect());
    let listen = a
        .listen
        .clone()
        .or_else(|| entry.as_ref().map(|e| e.listen.clone().unwrap_or_else(|| e.addr.clone())))
        .unwrap_or_else(|| "127.0.0.1:0".into());
    let data_dir =
        a.data_dir.clone().or_else(|| entry.as_ref().and_then(|e| e.data_dir.clone())).ok_or_else(|| {
            CliError::Failed(format!("give --data-dir, or a cluster file whose {node} has a data_dir"))
        })?;
    let transport = serve_transport(&a, file.as_ref(), node)?;
    let disk = a.disk.spec()?;
    if let Some(group) = &a.node_cgroup {
        ganges_server::node::join_cgroup(group)?;
    }
    let node_sampling = ganges_server::node::NodeConfig {
        cgroup: a.node_cgroup.clone(),
        net_bytes_per_sec: a.net_rate.0,
        memory_bytes: a.node_memory.map(|m| m.0),
    };
    let config = ganges_server::ServerConfig {
        disk,
        scheduler: a.scheduler,
        peers,
        node_sampling,
        model_link: a.model_link,
        direct_io: a.direct_io,
        queue_depth: a.disk.real_depth(),
        helper: binary().ok(),
        transport,
        metrics_listen: a.metrics_listen,
        txn_timeout: a.txn_timeout.0,
        max_connections: a.max_connections,
        ..ganges_server::ServerConfig::new(node, data_dir)
    };
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().max_blocking_threads(16).build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(listen.as_str())
            .await
            .map_err(|e| CliError::Failed(format!("listening on {listen}: {e}")))?;
        let addr = listener.local_addr()?;
        tracing::info!(
            node = a.node,
            %addr,
            disk = ?config.disk,
            direct_io = config.direct_io,
            secret = config.transport.has_secret(),
            tls = config.transport.has_tls(),
            "serving"
        );
        let mut stops = ganges_harness::sys::StopSignals::new()?;
        let shutdown = async move {
            stops.recv().await;
            tracing::info!("shutting down");
        };
        let server = ganges_server::run(config, listener, shutdown);
        // The ready line goes out once the listener is bound: connections queue until
        // the accept loop runs.
        println!("{}", local::ready_line(NodeId(a.node), addr));
        use std::io::Write;
        let _ = std::io::stdout().flush();
        server.await.map_err(|e| CliError::Failed(e.to_string()))
    })
}

/// How a server secures its connections: the secret from --secret-file, $GANGES_SECRET_FILE
/// or the cluster file; TLS from --tls-cert/--tls-key/--tls-ca or the cluster file's [tls].
fn serve_transport(a: &ServeArgs, file: Option<&ClusterFile>, node: NodeId) -> CliResult<ganges_net::Transport> {
    let env_secret =
        std::env::var_os(ganges_client::cluster::SECRET_FILE_ENV).filter(|p| !p.is_empty()).map(PathBuf::from);
    let secret_path = a.secret_file.clone().or(env_secret).or_else(|| file.and_then(|f| f.secret_path()));
    let secret =
        secret_path.map(|p| ganges_net::Secret::load(&p)).transpose().map_err(|e| CliError::Failed(e.to_string()))?;
    let t = ganges_net::Transport::plain().with_secret(secret);
    let tls = match (&a.tls_cert, &a.tls_key, &a.tls_ca) {
        (Some(cert), Some(key), Some(ca)) => Some((cert.clone(), key.clone(), ca.clone())),
        _ => file.map(|f| f.node_tls(node)).transpose()?.flatten(),
    };
    match tls {
        Some((cert, key, ca)) => t.with_tls_node(&cert, &key, &ca).map_err(|e| CliError::Failed(e.to_string())),
        None => Ok(t),
    }
}

fn local_spec(a: &LocalUpArgs, root: PathBuf) -> CliResult<LocalSpec> {
    Ok(LocalSpec {
        netns: a.netns,
        direct_io: a.direct_io,
        secret: a.secret,
        tls: a.tls,
        metrics: a.metrics,
        ..LocalSpec::new(a.nodes, root, a.disk.spec()?, binary()?)
    })
}

fn local_cmd(cmd: LocalCmd) -> CliResult<()> {
    match cmd {
        LocalCmd::Up(a) => {
            let root = a.root.clone().unwrap_or_else(default_local_root);
            let cluster_path = root.join("cluster.toml");
            if let Ok(existing) = ClusterFile::load(&cluster_path)
                && let Some(l) = &existing.local
                && ganges_harness::sys::alive(l.supervisor_pid)
            {
                return fail(format!(
                    "a local cluster is already running at {} (pid {}); stop it with `ganges local down`",
                    root.display(),
                    l.supervisor_pid
                ));
            }
            if a.netns
                && let Some(why) = ganges_harness::netns::unavailable()
            {
                return fail(why);
            }
            let spec = local_spec(&a, root.clone())?;
            if a.foreground {
                return Ok(local::supervise(&spec, &cluster_path, true)?);
            }
            let mut args = vec![
                "local".to_string(),
                "supervise".into(),
                "--nodes".into(),
                a.nodes.to_string(),
                "--root".into(),
                root.display().to_string(),
            ];
            args.extend(a.to_args());
            let pid = local::up_detached(&spec, &args)?;
            let file = ClusterFile::load(&cluster_path)?;
            println!(
                "{} servers up at {} ({}{}{}), supervisor pid {pid}",
                file.servers.len(),
                file.servers.iter().map(|s| s.addr.as_str()).collect::<Vec<_>>().join(" "),
                match spec.disk {
                    Some(d) => format!("disk model {}/s, seek {:?}", ByteSize(d.rate_bytes_per_sec as u64), d.seek),
                    None => "real file system".into(),
                },
                if spec.direct_io { ", direct I/O" } else { "" },
                if spec.secret_path().is_some() { ", cluster secret" } else { "" },
            );
            println!("cluster file: {}", cluster_path.display());
            if cluster_path != default_cluster_path() {
                println!(
                    "use it with --cluster {} (or export GANGES_CLUSTER={})",
                    cluster_path.display(),
                    cluster_path.display()
                );
            }
            println!(
                "stop with: ganges local down{}",
                if cluster_path != default_cluster_path() {
                    format!(" --cluster {}", cluster_path.display())
                } else {
                    String::new()
                }
            );
            Ok(())
        }
        LocalCmd::Supervise(a) => {
            let root = a.root.clone().unwrap_or_else(default_local_root);
            let spec = local_spec(&a, root.clone())?;
            Ok(local::supervise(&spec, &root.join("cluster.toml"), false)?)
        }
        LocalCmd::Status { cluster } => runtime()?.block_on(commands::cluster_status(&cluster.path())),
        LocalCmd::Restart { node, cluster } => {
            let path = cluster.path();
            let file = ClusterFile::load(&path)?;
            let Some(l) = &file.local else {
                return fail(format!(
                    "{} is not a local cluster's file; restart its servers where they run (`ganges serve`)",
                    path.display()
                ));
            };
            if node >= file.nodes() {
                return fail(format!("the cluster has nodes 0 to {}; there is no node {node}", file.nodes() - 1));
            }
            local::request_restart(&l.root, l.supervisor_pid, NodeId(node))?;
            println!("node{node} is up again at {}", file.servers[node as usize].addr);
            Ok(())
        }
        LocalCmd::Down { cluster } => {
            let path = cluster.path();
            let file = ClusterFile::load(&path)?;
            let Some(l) = file.local else {
                return fail(format!(
                    "{} is not a local cluster's file; stop its servers where they run",
                    path.display()
                ));
            };
            if local::down(l.supervisor_pid) {
                println!("stopped the local cluster at {}", l.root.display());
            } else {
                let _ = std::fs::remove_file(&path);
                println!("the local cluster at {} was not running; removed its stale cluster file", l.root.display());
            }
            Ok(())
        }
    }
}

async fn dataset_cmd(cmd: DatasetCmd) -> CliResult<()> {
    match cmd {
        DatasetCmd::Create(a) => {
            let size = match (a.size, a.fragment_size, a.fragment_sizes) {
                (Some(t), _, _) => Sizing::Total(t.0),
                (_, _, Some(list)) => Sizing::List(list.iter().map(|b| b.0).collect()),
                (_, Some(f), _) => Sizing::PerFragment(f.0),
                _ => Sizing::PerFragment(64 << 20),
            };
            let generator = match a.format.as_str() {
                "records" => Generator::Records { seed: a.seed },
                _ => Generator::Random { seed: a.seed },
            };
            let args = CreateArgs {
                name: name(&a.name)?,
                size,
                fragments: a.fragments,
                replicas: a.replicas,
                layout: a.layout,
                block_bytes: block_bytes(a.block_size)?,
                generator,
            };
            commands::dataset_create(&a.cluster.path(), args).await
        }
        DatasetCmd::Put { name: n, file, fragments, replicas, block_size, cluster } => {
            commands::dataset_put(&cluster.path(), name(&n)?, &file, fragments, replicas, block_bytes(block_size)?)
                .await
        }
        DatasetCmd::Get { name: n, file, policy, cluster } => {
            commands::dataset_get(&cluster.path(), name(&n)?, &file, ReadOptions::new(policy)).await
        }
        DatasetCmd::Read { name: n, offset, len, policy, buffer_blocks, out, cluster } => {
            let range = (offset.0, len.map(|l| l.0));
            let opts = ReadOptions::new(policy);
            commands::dataset_read(&cluster.path(), name(&n)?, range, opts, buffer_blocks, out.as_deref()).await
        }
        DatasetCmd::Ls { staging, cluster } => commands::dataset_ls(&cluster.path(), staging).await,
        DatasetCmd::Info { name: n, json, cluster } => commands::dataset_info(&cluster.path(), name(&n)?, json).await,
        DatasetCmd::Complete { name: n, cluster } => commands::dataset_complete(&cluster.path(), name(&n)?).await,
        DatasetCmd::Verify { name: n, cluster } => commands::dataset_verify(&cluster.path(), name(&n)?).await,
        DatasetCmd::Repair { name: n, cluster } => commands::dataset_complete(&cluster.path(), name(&n)?).await,
        DatasetCmd::Scrub { names, all, cluster } => {
            let names = names.iter().map(|n| name(n)).collect::<CliResult<Vec<_>>>()?;
            commands::dataset_scrub(&cluster.path(), names, all).await
        }
        DatasetCmd::Rm { name: n, cluster } => commands::dataset_rm(&cluster.path(), name(&n)?).await,
    }
}

async fn array_cmd(cmd: ArrayCmd) -> CliResult<()> {
    use ganges_cli::array::{self as cmds, layout};
    use ganges_core::array::{ArrayLayout, Schema, SubchunkStyle};
    match cmd {
        ArrayCmd::Write(a) => {
            let a = *a;
            let schema = Schema::new(a.shape, a.dtype).map_err(|e| CliError::Failed(e.to_string()))?;
            let rank = schema.rank();
            let memory = layout("memory", rank, a.memory.memory_mesh, a.memory.memory_dist, None)?;
            let servers = ClusterFile::load(&a.cluster.path())?.nodes();
            let disk = layout("disk", rank, a.disk_mesh, a.disk_dist, ArrayLayout::row_major(rank, servers).ok())?;
            let mut spec = ganges_client::array::ArraySpec::new(name(&a.name)?, schema, memory, disk, a.alloc);
            spec.threshold = a.subchunk.0;
            spec.replicas = a.replicas;
            if a.first_dim_subchunks {
                spec.style = SubchunkStyle::FirstDim;
            }
            cmds::write(&a.cluster.path(), spec, a.from.as_deref()).await
        }
        ArrayCmd::Read { name: n, memory, policy, to, cluster } => {
            let layout = match (memory.memory_mesh, memory.memory_dist) {
                (None, None) => None,
                (mesh, dist) => {
                    let client = ganges_cli::commands::connect(&cluster.path()).await?;
                    let m = client.manifest(&name(&n)?).await?;
                    let rank = ganges_client::array::meta(&m)?.schema.rank();
                    Some(layout("memory", rank, mesh, dist, None)?)
                }
            };
            cmds::read(&cluster.path(), name(&n)?, layout, policy, to.as_deref()).await
        }
        ArrayCmd::Info { name: n, json, cluster } => cmds::info(&cluster.path(), name(&n)?, json).await,
        ArrayCmd::Export { name: n, dir, cluster } => cmds::export(&cluster.path(), name(&n)?, &dir).await,
        ArrayCmd::Rm { name: n, cluster } => cmds::rm(&cluster.path(), name(&n)?).await,
    }
}

/// `ganges run` (`worker`: `ganges worker`, one rank of a launched run).
fn run_cmd(cmd: RunCmd, worker: bool) -> CliResult<()> {
    use ganges_cli::run::{RunArgs, Workers, default_runs, worker_place};
    use ganges_flow::apps::Primitive;
    let (app, flow) = match cmd {
        RunCmd::Scan { input, flow } => (Primitive::Scan { input: name(&input)? }, flow),
        RunCmd::Generate { output, size, data_seed, flow } => {
            let records = size.0 / 100;
            if records == 0 {
                return fail("--size holds no whole 100-byte record");
            }
            (Primitive::Generate { output: name(&output)?, records, seed: data_seed }, flow)
        }
        RunCmd::Filter { input, output, keep, flow } => {
            if !(0.0..=1.0).contains(&keep) {
                return fail("--keep is a share of the key space, between 0 and 1");
            }
            (Primitive::Filter { input: name(&input)?, output: name(&output)?, keep }, flow)
        }
        RunCmd::Topn { input, n, runs, after, flow } => {
            let input = name(&input)?;
            let runs = match runs {
                Some(r) => name(&r)?,
                None => default_runs(&input)?,
            };
            (Primitive::TopN { input, runs, n, after }, flow)
        }
        RunCmd::Join { left, right, output, key_bytes, flow } => {
            (Primitive::Join { left: name(&left)?, right: name(&right)?, output: name(&output)?, key_bytes }, flow)
        }
        RunCmd::Sort { input, output, check, flow } => {
            (Primitive::Sort { input: name(&input)?, output: name(&output)?, check }, flow)
        }
        RunCmd::Check { name: n, cluster } => {
            let args = RunArgs {
                app: Primitive::Check { name: name(&n)? },
                workers: Some(1),
                robust: true,
                seed: 1,
                placement: Workers::InProcess,
            };
            return runtime()?.block_on(ganges_cli::run::run(&cluster.path(), args));
        }
    };
    let placement = if worker {
        worker_place(flow.run_id.as_deref())?
    } else if flow.in_process || matches!(app, Primitive::TopN { after: Some(_), .. }) {
        Workers::InProcess
    } else {
        // The others run what this one was asked: the command line after `run`.
        let argv: Vec<String> = std::env::args().collect();
        let at = argv.iter().position(|a| a == "run").map_or(argv.len(), |i| i + 1);
        Workers::Launch { args: argv[at..].to_vec() }
    };
    let args = RunArgs { app, workers: flow.workers, robust: !flow.fixed, seed: flow.seed, placement };
    runtime()?.block_on(ganges_cli::run::run(&flow.cluster.path(), args))
}

fn bench_scan(a: BenchScanArgs) -> CliResult<()> {
    let mut spec = ScanBenchSpec {
        nodes: a.nodes,
        replicas: a.replicas,
        layout: a.layout,
        fragment_bytes: bench_fragment_bytes(a.fragment_size, a.real.real),
        block_sizes: a.block_sizes.iter().map(|b| block_bytes(*b)).collect::<CliResult<_>>()?,
        disk: if a.real.real { None } else { a.disk.spec()? },
        fault: a.fault.fault(),
        faults: a.faults,
        fault_layout: a.fault_layout,
        schedule: a.fault_schedule,
        seed: a.seed,
        policies: a.policies,
        window: a.window,
        settings: a.settings.settings()?,
        ratios: a.ratio,
        access: a.access,
        repeat: a.repeat.max(1),
        sim: a.sim,
        metrics_scrape: a.metrics_scrape,
        dashboard: a.dashboard,
        root: a.root,
        binary: binary()?,
        json: a.json,
        plot: a.plot,
        plot_time: a.plot_time,
        real: a.real.spec(&a.fault, false),
    };
    if a.quick {
        spec.nodes = 4;
        spec.fragment_bytes = 4 << 20;
        spec.block_sizes = vec![128 << 10];
        spec.faults = vec![0, 1, 2];
    }
    let report = bench::run_scan(&spec)?;
    print!("{}", bench::render(&report));
    bench::write_outputs(&report, spec.json.as_ref(), spec.plot.as_ref(), spec.plot_time.as_ref())?;
    for (what, p) in [("json", &spec.json), ("plot", &spec.plot), ("plot of rates over time", &spec.plot_time)] {
        if let Some(p) = p {
            println!("{what}: {}", p.display());
        }
    }
    Ok(())
}

fn bench_array(a: BenchArrayArgs) -> CliResult<()> {
    use ganges_bench::array::{self as bench_arr, Figure};
    let figures = a
        .figures
        .iter()
        .map(|f| match f {
            ArrayFigure::Natural => Figure::Natural,
            ArrayFigure::RowMajor => Figure::RowMajor,
            ArrayFigure::Iterations => Figure::Iterations,
            ArrayFigure::Reads => Figure::Reads,
            ArrayFigure::PartTime => Figure::PartTime,
        })
        .filter(|f| {
            let keep = !(a.real && *f == Figure::PartTime);
            if !keep {
                eprintln!(
                    "leaving out the part-time figure: its servers run in the bench's own process, which \
                     --real's per-process kernel throttles cannot make one of slow"
                );
            }
            keep
        })
        .collect();
    let mut spec = bench_arr::ArrayBenchSpec {
        figures,
        servers: a.servers,
        iteration_servers: a.iteration_servers,
        read_servers: a.read_servers,
        read_policies: a.read_policies,
        part_time_servers: a.part_time_servers,
        shape: a.shape,
        allocs: a.allocs,
        disk: DiskParams { rate_bytes_per_sec: a.disk_rate.0, seek: a.seek.0, queue_depth: 1 },
        repeat: a.repeat.max(1),
        iterations: a.iterations.max(5),
        binary: binary()?,
        real: a.real.then(|| ganges_bench::real::RealSpec {
            kind: ganges_bench::real::RealFaultKind::Kernel,
            factor: bench_arr::SLOW_FACTOR,
            share: 0.5,
            isolate: true,
            cap: a.disk_cap.map(|r| r.0),
            writes: true,
        }),
    };
    if a.quick {
        spec.shape = vec![256, 256, 256];
        spec.servers = vec![2, 4, 8];
        spec.iteration_servers = vec![2, 8];
        spec.read_servers = vec![4];
        spec.part_time_servers = vec![4];
        spec.repeat = 1;
        spec.iterations = 6;
    }
    if [&spec.servers, &spec.iteration_servers, &spec.read_servers].iter().any(|s| s.contains(&0)) {
        return fail("a server count must be at least 1");
    }
    let report = bench_arr::run(&spec)?;
    print!("{}", bench_arr::render(&report));
    bench_arr::write_outputs(&report, a.json.as_ref(), a.plot.as_ref())?;
    for (what, p) in [("json", &a.json), ("plot", &a.plot)] {
        if let Some(p) = p {
            println!("{what}: {}", p.display());
        }
    }
    Ok(())
}

fn bench_write(a: BenchWriteArgs) -> CliResult<()> {
    let mut spec = ganges_bench::write::WriteBenchSpec {
        nodes: a.nodes,
        replicas: a.replicas,
        fragment_bytes: bench_fragment_bytes(a.fragment_size, a.real.real),
        block_bytes: block_bytes(a.block_size)?,
        disk: if a.real.real { None } else { a.disk.spec()? },
        fault: a.fault.fault(),
        faults: a.faults,
        fault_layout: a.fault_layout,
        seed: a.seed,
        policies: a.policies,
        window: a.window,
        repeat: a.repeat.max(1),
        complete: !a.no_complete,
        root: a.root,
        binary: binary()?,
        json: a.json,
        plot: a.plot,
        stress: a.stress.map(|k| (k, a.on)),
        mirrored: a.layout.map(|l| l == LayoutChoice::Mirrored),
        ceft: a.ceft.settings(),
        real: a.real.spec(&a.fault, true),
    };
    if spec.policies.is_empty() {
        spec.policies = match spec.stress {
            Some(_) => vec![WritePolicyKind::Static, WritePolicyKind::Ceft, WritePolicyKind::CeftAdaptive],
            None => vec![WritePolicyKind::Static, WritePolicyKind::Gd, WritePolicyKind::Dq],
        };
    }
    if a.quick {
        spec.nodes = 4;
        spec.fragment_bytes = 4 << 20;
        spec.block_bytes = 128 << 10;
        spec.faults = vec![0, 1, 2];
    }
    let report = ganges_bench::write::run_write(&spec)?;
    print!("{}", ganges_bench::write::render(&report));
    ganges_bench::write::write_outputs(&report, spec.json.as_ref(), spec.plot.as_ref())?;
    for (what, p) in [("json", &spec.json), ("plot", &spec.plot)] {
        if let Some(p) = p {
            println!("{what}: {}", p.display());
        }
    }
    Ok(())
}

fn sim(a: SimArgs) -> CliResult<()> {
    if a.list {
        ganges_bench::sim::list();
        return Ok(());
    }
    let Some(name) = a.scenario else {
        return fail("name a scenario (`ganges sim --list` shows them)");
    };
    if name == "hunt" {
        return Ok(ganges_bench::sim::hunt(a.seed, a.seeds, a.json.as_ref())?);
    }
    let opts = SimOptions {
        producers: a.producers,
        consumers: a.consumers,
        producer_rate: a.producer_rate.map(|r| r.0),
        consumer_rate: a.consumer_rate.map(|r| r.0),
        fault_rate: a.fault_rate.map(|r| r.0),
        faults: a.faults,
        blocks: a.blocks,
        block_bytes: a.block_size.map(|b| b.0),
        seek: a.seek.map(|d| d.0),
        policies: a.policies,
        seed: a.seed,
    };
    Ok(ganges_bench::sim::run(&name, &opts, a.json.as_ref(), a.plot.as_ref())?)
}

fn demo(a: DemoArgs) -> CliResult<()> {
    let disk =
        DiskParams { rate_bytes_per_sec: 32.0 * 1024.0 * 1024.0, seek: Duration::from_millis(4), queue_depth: 1 };
    std::fs::create_dir_all(&a.out).map_err(|e| CliError::Failed(format!("creating {}: {e}", a.out.display())))?;
    let json = a.out.join("demo-scan.json");
    let plot = a.out.join("demo-scan.svg");
    let faults: Vec<u32> = [0, 1, 2, 4, 8].into_iter().filter(|&f| f <= a.nodes).collect();
    let spec = ScanBenchSpec {
        nodes: a.nodes,
        replicas: 2,
        fragment_bytes: a.fragment_size.0,
        layout: LayoutChoice::Chained,
        block_sizes: vec![1 << 20],
        disk: Some(disk),
        fault: Fault::Factor { factor: 0.5 },
        faults,
        fault_layout: FaultLayout::Best,
        schedule: vec![],
        seed: 1,
        policies: vec![ReadPolicyKind::Static, ReadPolicyKind::Gd, ReadPolicyKind::GdPlan],
        window: None,
        settings: PolicySettings::default(),
        ratios: vec![Ratio::EQUAL],
        access: Access::Scan,
        repeat: 1,
        sim: false,
        metrics_scrape: false,
        dashboard: None,
        root: None,
        binary: binary()?,
        json: Some(json.clone()),
        plot: Some(plot.clone()),
        plot_time: None,
        real: None,
    };
    println!(
        "ganges demo: {} storage servers on this machine, each with a modelled disk of 32 MiB/s and a 4 ms seek;",
        a.nodes
    );
    println!(
        "a dataset of {} fragments x {} with 2 copies (chained declustering), read by {} consumers,",
        a.nodes, a.fragment_size, a.nodes
    );
    println!("first with the static policy (each consumer reads its own fragment's primary copy),");
    println!("then with graduated declustering (gd, as the papers have it, and gd-plan, ours: shares");
    println!("planned from every disk's measured speed), while 0, 1, 2, 4 and 8 disks run at half speed.\n");
    let report = bench::run_scan(&spec)?;
    print!("{}", bench::render(&report));
    bench::write_outputs(&report, Some(&json), Some(&plot), None)?;
    println!();
    println!("% layout is the share of the best time the hardware could have managed with those slow");
    println!("disks and this layout (the layout-aware ideal); static falls to about half from one slow");
    println!("disk on, graduated declustering stays near the ideal; gd-plan also reads only primary");
    println!("copies when every disk is as fast as the others, where gd may read both and pay seeks.");
    println!("results: {} and {}", json.display(), plot.display());
    Ok(())
}
