use super::*;
use proptest::prelude::*;

const MIB: u64 = 1 << 20;

/// An array of u32 whose every element holds its own row-major index.
fn numbered(schema: &Schema) -> Vec<u8> {
    (0..schema.elements() as u32).flat_map(u32::to_le_bytes).collect()
}

fn layout(mesh: &[u32], dist: &str) -> ArrayLayout {
    let dist = dist.split(',').map(|d| d.parse().unwrap()).collect();
    ArrayLayout::new(mesh.to_vec(), dist).unwrap()
}

#[test]
fn figure_2_both_cases_give_32_subchunks_of_1_mib() {
    // A 32 MiB array over a 4×2 compute mesh, (BLOCK, BLOCK) (panda Figure 2).
    let schema = Schema::new(vec![2048, 4096], DType::F32).unwrap();
    let natural = Subchunks::new(&schema, &layout(&[4, 2], "BLOCK,BLOCK"), SubchunkStyle::SameDist, MIB).unwrap();
    assert_eq!(natural.submesh, vec![2, 2]);
    assert_eq!(natural.len(), 32);
    assert!(natural.sizes().iter().all(|&b| b == MIB));
    let rows = Subchunks::new(&schema, &layout(&[2], "BLOCK,*"), SubchunkStyle::SameDist, MIB).unwrap();
    assert_eq!(rows.submesh, vec![16, 1]);
    assert_eq!(rows.len(), 32);
    assert!(rows.sizes().iter().all(|&b| b == MIB));
}

#[test]
fn the_issue_s_array_cuts_into_512_subchunks() {
    let schema = Schema::new(vec![512, 512, 512], DType::F32).unwrap();
    let s = Subchunks::new(&schema, &layout(&[2, 2, 2], "BLOCK,BLOCK,BLOCK"), SubchunkStyle::SameDist, MIB).unwrap();
    assert_eq!((s.submesh.clone(), s.len()), (vec![4, 4, 4], 512));
    let first = Subchunks::new(&schema, &layout(&[8], "BLOCK,*,*"), SubchunkStyle::FirstDim, MIB).unwrap();
    assert_eq!((first.submesh.clone(), first.len()), (vec![64, 1, 1], 512));
}

#[test]
fn all_star_is_left_whole_and_tiny_chunks_stop_halving() {
    let schema = Schema::new(vec![1024, 1024], DType::F64).unwrap();
    let whole = Subchunks::new(&schema, &ArrayLayout::whole(2), SubchunkStyle::SameDist, MIB).unwrap();
    assert_eq!(whole.len(), 1);
    let thin = Schema::new(vec![3, 1 << 20], DType::U8).unwrap();
    let s = Subchunks::new(&thin, &layout(&[1], "BLOCK,*"), SubchunkStyle::SameDist, 1024).unwrap();
    // Only the first dimension may be cut, and it has 3 rows: it stops at 2 parts.
    assert_eq!(s.submesh, vec![2, 1]);
}

#[test]
fn subchunks_too_large_or_too_many_are_refused_with_advice() {
    // A disk layout that distributes nothing leaves the whole 64 MiB array as one subchunk.
    let schema = Schema::new(vec![4096, 4096], DType::F32).unwrap();
    let err = Subchunks::new(&schema, &ArrayLayout::whole(2), SubchunkStyle::SameDist, MIB).unwrap_err();
    assert!(err.to_string().contains("distribute more dimensions"), "{err}");
    let long = Schema::new(vec![1 << 17, 4], DType::U8).unwrap();
    let err = Subchunks::new(&long, &layout(&[1], "BLOCK,*"), SubchunkStyle::SameDist, 1).unwrap_err();
    assert!(err.to_string().contains("larger subchunk size"), "{err}");
}

#[test]
fn static_allocation_follows_the_paper_s_worked_example() {
    // 128 subchunks of 1 MB, nodes at 5 and 2 MB/s (panda §3.2).
    let sizes = vec![1_000_000u64; 128];
    let plan = static_alloc(&sizes, &[5e6, 2e6], &[]);
    assert_eq!(&plan[..3], &[0, 0, 1]);
    let fast = plan.iter().filter(|&&s| s == 0).count();
    // Both finish within one subchunk's time of each other: 5:2 of 128 is 91.4.
    assert!((91..=92).contains(&fast), "{fast}");
}

#[test]
fn dynamic_allocation_follows_the_paper_s_worked_example() {
    // 128 subchunks, nodes at 5 and 3 MB/s, N = 20 (panda §3.2).
    let mut m = Dynamic::new(vec![MIB; 128], &[5e6, 3e6], DYNAMIC_PER_ROUND);
    assert_eq!(m.grant(0, None).len(), 25);
    assert_eq!(m.grant(1, None).len(), 15);
    assert_eq!(m.grant(0, None).len(), 25);
    assert_eq!(m.grant(1, None).len(), 15);
    // 48 remain, between a half and a third: ten per server this round.
    let third = m.grant(0, None).len() + m.grant(1, None).len();
    assert!((19..=20).contains(&third), "{third}");
    let mut rest = 0;
    while !m.is_done() {
        let g = m.grant(rest % 2, None);
        assert!(!g.is_empty());
        rest += 1;
    }
    assert_eq!(m.granted().iter().sum::<u64>(), 128);
    assert!(m.grant(0, None).is_empty());
}

/// The manager's load (the paper's 0/16 case): on the bench's 512 subchunks, the grants per
/// call (98 at 2 servers, 88 at 8, 96 at 16, 256 at 64): never more than one per subchunk.
#[test]
fn the_manager_grants_at_most_once_per_subchunk() {
    for servers in [2u32, 8, 16, 64] {
        let mut m = Dynamic::new(vec![MIB; 512], &vec![1e6; servers as usize], DYNAMIC_PER_ROUND);
        let mut asks = 0;
        while !m.is_done() {
            m.grant(asks % servers, None);
            asks += 1;
        }
        // Never more asks than subchunks: the rounds shrink to one subchunk each at the end.
        assert!(asks <= 512, "{servers} servers: {asks} asks");
    }
}

#[test]
fn a_round_hands_out_at_most_half_of_what_is_left() {
    // 512 subchunks on 16 servers: 16 each in the first round (N = 20 would be 320 of 512).
    let mut m = Dynamic::new(vec![MIB; 512], &[1e6; 16], DYNAMIC_PER_ROUND);
    assert_eq!(m.grant(0, None).len(), 16);
    // On 2 servers N binds first, as in the paper.
    assert_eq!(Dynamic::new(vec![MIB; 512], &[1e6; 2], DYNAMIC_PER_ROUND).grant(0, None).len(), 20);
}

#[test]
fn dynamic_allocation_follows_reported_rates() {
    let mut m = Dynamic::new(vec![MIB; 400], &[10e6, 10e6], DYNAMIC_PER_ROUND);
    assert_eq!(m.grant(0, Some(30e6)).len(), 30);
    assert_eq!(m.grant(1, Some(10e6)).len(), 10);
}

#[test]
fn generated_elements_hold_their_index_whatever_the_region() {
    let schema = Schema::new(vec![3, 5], DType::U16).unwrap();
    let whole = generated(&schema, &schema.whole());
    assert_eq!(whole, (0u16..15).flat_map(u16::to_le_bytes).collect::<Vec<u8>>());
    let part = Region { dims: vec![vec![1..3], vec![0..1, 3..5]] };
    let got: Vec<u16> = generated(&schema, &part).chunks(2).map(|c| u16::from_le_bytes([c[0], c[1]])).collect();
    assert_eq!(got, vec![5, 8, 9, 10, 13, 14]);
    assert_eq!(gather(2, &schema.whole(), &whole, &part).unwrap(), generated(&schema, &part));
}

#[test]
fn a_thief_goes_round_the_others_and_stops_after_a_dry_round() {
    let mut t = Thief::new(2, 4);
    assert_eq!(t.victim(), Some(3));
    t.on_reply(5);
    assert_eq!(t.victim(), Some(3), "asks the giver again");
    t.on_reply(0);
    assert_eq!(t.victim(), Some(0));
    t.on_reply(0);
    assert_eq!(t.victim(), Some(1), "never itself");
    t.on_reply(0);
    assert_eq!(t.victim(), None, "three in a row had nothing");
    assert_eq!(Thief::new(0, 1).victim(), None);
    // A thief twice as fast takes two thirds, and the victim keeps one.
    assert_eq!(Thief::share(9, 2.0, 1.0), 6);
    assert_eq!(Thief::share(1, 5.0, 1.0), 0);
}

#[test]
fn whole_rows_of_a_chunk_are_a_run_of_its_bytes() {
    let chunk = Region::boxed(vec![10..20, 0..8, 0..4]);
    assert_eq!(contiguous(4, &chunk, &Region::boxed(vec![12..15, 0..8, 0..4])), Some(256..640));
    assert_eq!(contiguous(4, &chunk, &Region::boxed(vec![12..13, 2..5, 0..4])), Some(288..336));
    assert_eq!(contiguous(4, &chunk, &Region::boxed(vec![12..14, 2..5, 0..4])), None);
    assert_eq!(contiguous(4, &chunk, &Region::boxed(vec![12..13, 2..3, 1..3])), Some(292..300));
}

#[test]
fn round_robin_deals_in_turn() {
    assert_eq!(round_robin(5, 2), vec![0, 1, 0, 1, 0]);
}

#[test]
fn layouts_parse_as_the_command_line_writes_them() {
    assert_eq!("cyclic(4)".parse::<Dist>().unwrap(), Dist::Cyclic(4));
    assert!("CYCLIC(0)".parse::<Dist>().is_err());
    assert!("ROWS".parse::<Dist>().is_err());
    let l = layout(&[8], "BLOCK,*,*");
    assert_eq!(l.mesh, vec![8, 1, 1]);
    assert!(ArrayLayout::new(vec![2, 2], vec![Dist::Block, Dist::Star, Dist::Star]).is_err());
    assert!(ArrayLayout::new(vec![2, 2], vec![Dist::Block, Dist::Star]).is_err());
    assert!(Schema::new(vec![], DType::U8).is_err());
    assert!(Schema::new(vec![4, 0], DType::U8).is_err());
}

fn dist_strategy() -> impl Strategy<Value = Dist> {
    prop_oneof![Just(Dist::Block), Just(Dist::Star), (1u64..4).prop_map(Dist::Cyclic)]
}

fn case() -> impl Strategy<Value = (Schema, ArrayLayout, ArrayLayout, u64)> {
    (1usize..=4).prop_flat_map(|rank| {
        (
            prop::collection::vec(1u64..9, rank),
            prop::collection::vec((1u32..4, dist_strategy()), rank),
            prop::collection::vec((1u32..4, prop::bool::ANY), rank),
            16u64..512,
        )
            .prop_map(|(shape, mem, disk, threshold)| {
                let schema = Schema::new(shape, DType::U32).unwrap();
                let fix = |(m, d): (u32, Dist)| if d == Dist::Star { (1, d) } else { (m, d) };
                let (mm, md): (Vec<u32>, Vec<Dist>) = mem.into_iter().map(fix).unzip();
                let (dm, dd): (Vec<u32>, Vec<Dist>) =
                    disk.into_iter().map(|(m, block)| if block { (m, Dist::Block) } else { (1, Dist::Star) }).unzip();
                (schema, ArrayLayout::new(mm, md).unwrap(), ArrayLayout::new(dm, dd).unwrap(), threshold)
            })
    })
}

proptest! {
    /// Every element lands in exactly one memory chunk and one subchunk, and moving the data
    /// from the memory layout to the subchunks and back gives every element its own value.
    #[test]
    fn every_element_lands_exactly_once((schema, mem, disk, threshold) in case(), first_dim in prop::bool::ANY) {
        let elem = schema.dtype.size();
        let whole = schema.whole();
        let data = numbered(&schema);
        let style = if first_dim { SubchunkStyle::FirstDim } else { SubchunkStyle::SameDist };
        let subs = Subchunks::new(&schema, &disk, style, threshold).unwrap();
        let chunks: Vec<Region> = (0..mem.positions()).map(|p| mem.chunk(&schema, p)).collect();
        prop_assert_eq!(chunks.iter().map(Region::elements).sum::<u64>(), schema.elements());
        prop_assert_eq!(subs.boxes.iter().map(Region::elements).sum::<u64>(), schema.elements());
        let local: Vec<Vec<u8>> = chunks.iter().map(|c| gather(elem, &whole, &data, c).unwrap()).collect();
        // Where a piece is a run of its chunk's bytes, the run is exactly what gather copies.
        for (c, bytes) in chunks.iter().zip(&local) {
            for sub in &subs.boxes {
                let part = c.intersect(sub);
                if let Some(r) = contiguous(elem, c, &part) {
                    prop_assert_eq!(&bytes[r], &gather(elem, c, bytes, &part).unwrap()[..]);
                }
            }
        }
        // Write: each subchunk gathered from the pieces of every memory chunk it overlaps.
        let mut back: Vec<Vec<u8>> = chunks.iter().map(|c| vec![0xff; (c.elements() * 4) as usize]).collect();
        for sub in &subs.boxes {
            let mut buf = vec![0xff; (sub.elements() * 4) as usize];
            for (c, bytes) in chunks.iter().zip(&local) {
                let part = c.intersect(sub);
                let piece = gather(elem, c, bytes, &part).unwrap();
                copy_overlap(elem, &part, &piece, sub, &mut buf, &part).unwrap();
            }
            prop_assert_eq!(&buf, &gather(elem, &whole, &data, sub).unwrap());
            // Read: scatter the subchunk back into every memory chunk.
            for (c, out) in chunks.iter().zip(back.iter_mut()) {
                copy_overlap(elem, sub, &buf, c, out, &c.intersect(sub)).unwrap();
            }
        }
        prop_assert_eq!(back, local);
    }

    /// With or without homes (part-time I/O nodes), static allocation's makespan is within
    /// the largest subchunk at the slowest rate of the best.
    #[test]
    fn static_allocation_finishes_within_one_subchunk_of_the_best(
        sizes in prop::collection::vec(1u64..4, 1..200),
        rates in prop::collection::vec(1.0f64..10.0, 1..9),
        homes in prop::collection::vec(prop::option::of(0u32..10), 0..200),
    ) {
        let plan = static_alloc(&sizes, &rates, &homes);
        let mut t = vec![0.0; rates.len()];
        for (&s, &b) in plan.iter().zip(&sizes) {
            t[s as usize] += b as f64 / rates[s as usize];
        }
        let makespan = t.iter().cloned().fold(0.0, f64::max);
        let ideal = sizes.iter().sum::<u64>() as f64 / rates.iter().sum::<f64>();
        let slack = 3.0 / rates.iter().cloned().fold(f64::INFINITY, f64::min);
        prop_assert!(makespan <= ideal + slack, "{makespan} vs {ideal}");
    }
}

#[test]
fn homed_static_allocation_keeps_each_process_s_subchunks_on_its_own_server() {
    // Natural chunking: 8 chunks of 8 subchunks, each chunk held by a process serving the
    // disk of the same number.
    let sizes = vec![MIB; 64];
    let homes: Vec<Option<u32>> = (0..64).map(|i| Some(i / 8)).collect();
    assert_eq!(static_alloc(&sizes, &[1.0; 8], &homes), homes.iter().map(|h| h.unwrap()).collect::<Vec<_>>());
    // Server 0 at half speed keeps its share, rounded (64 × 0.5/7.5 = 4.3 subchunks: 4), in
    // order; its other 4 go where they finish first; every other server keeps all of its own.
    let mut rates = [1.0; 8];
    rates[0] = 0.5;
    let plan = static_alloc(&sizes, &rates, &homes);
    assert_eq!(&plan[..4], &[0, 0, 0, 0]);
    assert!(plan[4..8].iter().all(|&s| s != 0), "{plan:?}");
    for i in 8..64 {
        assert_eq!(plan[i], (i / 8) as u32, "subchunk {i}: {plan:?}");
    }
    // Without homes, the paper's allocation.
    assert_eq!(static_alloc(&sizes, &rates, &[]), static_alloc(&sizes, &rates, &vec![None; 64]));
}

#[test]
fn a_subchunk_s_home_is_the_server_of_the_process_holding_most_of_it() {
    let schema = Schema::new(vec![8, 8], DType::U8).unwrap();
    let mem = layout(&[2, 1], "BLOCK,*");
    let chunks: Vec<Region> = (0..2).map(|r| mem.chunk(&schema, r)).collect();
    // Subchunks of 3 rows: rows 0-2 (process 0), 3-5 (1 of process 0, 2 of process 1), 6-7.
    let boxes: Vec<Region> = [(0, 3), (3, 6), (6, 8)].iter().map(|&(a, b)| Region::boxed(vec![a..b, 0..8])).collect();
    assert_eq!(subchunk_homes(&boxes, &chunks, &[Some(5), Some(2)]), vec![Some(5), Some(2), Some(2)]);
    // Process 1 serves nothing: its rows have no home, shared ones go to process 0's server.
    assert_eq!(subchunk_homes(&boxes, &chunks, &[Some(5), None]), vec![Some(5), Some(5), None]);
    assert_eq!(subchunk_homes(&boxes, &chunks, &[None, None]), vec![None, None, None]);
}

#[test]
fn homed_dynamic_allocation_hands_each_server_its_own_first_then_the_longest_tail() {
    // 4 servers, 16 subchunks each homed on the server of their process.
    let homes: Vec<Option<u32>> = (0..64).map(|i| Some(i / 16)).collect();
    let mut m = Dynamic::with_homes(vec![MIB; 64], &[1.0; 4], 4, &homes);
    let mut got: Vec<Vec<u32>> = vec![vec![]; 4];
    // Servers 1-3 ask twice as often as server 0 (a slow disk).
    let mut turn = 0;
    while !m.is_done() {
        let s = [1, 2, 3, 0, 1, 2, 3][turn % 7];
        turn += 1;
        got[s].extend(m.grant(s as u32, None));
    }
    let mut all: Vec<u32> = got.concat();
    all.sort_unstable();
    assert_eq!(all, (0..64).collect::<Vec<u32>>(), "every subchunk once");
    // Each server wrote its own first; server 0 only its own, from the front; the others
    // took the rest of server 0's from the back once theirs were gone.
    for (s, g) in got.iter().enumerate() {
        let own = g.iter().take_while(|&&i| i / 16 == s as u32).count();
        assert!(own == 16.min(g.len()), "server {s}: {g:?}");
    }
    assert!(got[0].iter().all(|&i| i < 16) && got[0].windows(2).all(|w| w[0] < w[1]), "{:?}", got[0]);
    assert!(got[0].len() < 16, "the slow server's tail was taken: {:?}", got[0]);
    // Without homes, each batch is the next run, as in the paper.
    let mut plain = Dynamic::new(vec![MIB; 8], &[1.0, 1.0], 2);
    assert_eq!(plain.grant(1, None), vec![0, 1]);
    assert_eq!(plain.grant(0, None), vec![2, 3]);
}

proptest! {
    /// A read spread over fragments is a permutation that keeps each fragment's own order,
    /// and every prefix holds each fragment's share of it within `1 + G·s/2` pieces (`G`
    /// fragments, `s` this one's share): every fragment's count stays within half a piece
    /// of its own schedule, so the prefix's length is off by at most `G/2`.
    #[test]
    fn a_read_spread_over_fragments_keeps_every_prefix_in_proportion(
        fragments in prop::collection::vec(0u32..6, 0..200)
    ) {
        let order = spread_over_fragments(&fragments);
        let mut seen = order.clone();
        seen.sort_unstable();
        prop_assert_eq!(seen, (0..fragments.len()).collect::<Vec<_>>());
        let n = fragments.len() as f64;
        let groups = fragments.iter().collect::<std::collections::BTreeSet<_>>().len() as f64;
        for f in 0..6u32 {
            let total = fragments.iter().filter(|&&x| x == f).count() as f64;
            let mine: Vec<usize> = order.iter().copied().filter(|&i| fragments[i] == f).collect();
            prop_assert!(mine.windows(2).all(|w| w[0] < w[1]), "fragment {} out of its order", f);
            let mut got = 0.0;
            for (m, &i) in order.iter().enumerate() {
                got += f64::from(u8::from(fragments[i] == f));
                let share = (m + 1) as f64 * total / n;
                prop_assert!((got - share).abs() <= 1.0 + groups * total / n / 2.0 + 1e-9, "fragment {} at {}: {} of {}", f, m, got, share);
            }
        }
    }
}

#[test]
fn runs_on_one_fragment_are_interleaved() {
    // Two runs, as an allocation leaves them: read alternately, not one after the other.
    let order = spread_over_fragments(&[3, 3, 3, 5, 5, 5]);
    assert_eq!(order, vec![0, 3, 1, 4, 2, 5]);
}
