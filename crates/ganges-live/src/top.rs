//! `ganges top`: the live view in a terminal, for machines without a browser.
//!
//! Servers (served rate with a one-minute sparkline, disk rate, queue, handoffs, faults),
//! then each scan's consumers as bars (primary copies `█`, backups `▒`, the ideal run `│`),
//! then a bench's table if one is running. `q`, Esc or Ctrl-C quits.

use crate::collect::{ScanView, ServerView};
use crate::{Frame, Live};
use ratatui::Frame as Screen;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Paragraph, Row, Table};

const SPARKS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
/// Width of a sparkline, in ticks (the most recent).
const SPARK_WIDTH: usize = 24;

/// Run until the user quits. Blocking: call it off the async runtime that drives `live`.
pub fn run(live: &Live) -> std::io::Result<()> {
    use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
    let mut terminal = ratatui::try_init()?;
    let result = (|| -> std::io::Result<()> {
        loop {
            let frame = live.latest();
            let history = live.rate_history();
            terminal.draw(|s| draw(s, &frame, &history))?;
            if event::poll(live.period())?
                && let Event::Key(k) = event::read()?
                && k.kind == KeyEventKind::Press
                && (matches!(k.code, KeyCode::Char('q') | KeyCode::Esc)
                    || (k.code == KeyCode::Char('c') && k.modifiers.contains(KeyModifiers::CONTROL)))
            {
                return Ok(());
            }
        }
    })();
    ratatui::restore();
    result
}

/// Draw one frame of the view (`history`: each server's served rate, oldest first).
pub fn draw(s: &mut Screen<'_>, frame: &Frame, history: &[Vec<f64>]) {
    let snap = &frame.snapshot;
    let consumers: usize = snap.scans.iter().map(|sc| sc.consumers.len() + 1).sum();
    let table_rows = frame.table.as_ref().map_or(0, |t| t.rows.len() + 3);
    let [title, servers, scans, table] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(snap.servers.len() as u16 + 3),
        Constraint::Min((consumers.max(1) + 2) as u16),
        Constraint::Length(table_rows as u16),
    ])
    .areas(s.area());
    let head = format!("ganges top  {}  t = {:.1} s  (q quits)", snap.cluster, snap.t);
    s.render_widget(Paragraph::new(head).style(Style::new().add_modifier(Modifier::BOLD)), title);
    draw_servers(s, servers, &snap.servers, history);
    draw_scans(s, scans, &snap.scans);
    if let Some(t) = &frame.table {
        let widths = vec![Constraint::Min(8); t.columns.len()];
        let rows = t.rows.iter().map(|r| Row::new(r.clone()));
        let header = Row::new(t.columns.clone()).style(Style::new().add_modifier(Modifier::BOLD));
        s.render_widget(
            Table::new(rows, widths).header(header).block(Block::bordered().title(t.title.as_str())),
            table,
        );
    }
}

fn draw_servers(s: &mut Screen<'_>, area: Rect, servers: &[ServerView], history: &[Vec<f64>]) {
    let peak = history.iter().flatten().copied().fold(1.0, f64::max);
    let rows = servers.iter().map(|v| {
        let spark = history.get(v.node as usize).map_or(String::new(), |h| sparkline(h, peak));
        let disk = v.disk_bytes_per_sec.map_or("-".into(), |r| format!("{:.1}", r / 1e6));
        let row = Row::new(vec![
            format!("node{}", v.node),
            if v.up { format!("{:.1}", v.read_bytes_per_sec / 1e6) } else { "down".into() },
            spark,
            disk,
            v.queued.to_string(),
            format!("{}/{}", v.handed_off, v.taken_over),
            v.fault.clone().unwrap_or_default(),
        ]);
        if !v.up {
            row.style(Style::new().fg(Color::Red))
        } else if v.fault.is_some() {
            row.style(Style::new().fg(Color::Yellow))
        } else {
            row
        }
    });
    let widths = [
        Constraint::Length(7),
        Constraint::Length(9),
        Constraint::Length(SPARK_WIDTH as u16),
        Constraint::Length(9),
        Constraint::Length(6),
        Constraint::Length(9),
        Constraint::Min(10),
    ];
    let header = Row::new(["server", "MB/s", "last minute", "disk MB/s", "queue", "handoffs", "fault"])
        .style(Style::new().add_modifier(Modifier::BOLD));
    s.render_widget(Table::new(rows, widths).header(header).block(Block::bordered().title("servers")), area);
}

fn draw_scans(s: &mut Screen<'_>, area: Rect, scans: &[ScanView]) {
    let mut lines = vec![];
    let bar_width = area.width.saturating_sub(34).max(10) as usize;
    for scan in scans {
        let ideal = scan.ideal_seconds.map_or(String::new(), |i| format!(", ideal {i:.1} s"));
        let state = if scan.running { "" } else { ", done" };
        lines.push(Line::styled(
            format!("{}: {} consumers, {:.1} s{ideal}{state}", scan.dataset, scan.consumers.len(), scan.elapsed),
            Style::new().add_modifier(Modifier::BOLD),
        ));
        let mark = scan.ideal_fraction().map(|f| ((f * bar_width as f64) as usize).min(bar_width - 1));
        for c in &scan.consumers {
            let got = (c.primary_bytes + c.backup_bytes).max(1) as f64;
            let cells = (c.fraction() * bar_width as f64).round() as usize;
            let primary = (cells as f64 * c.primary_bytes as f64 / got).round() as usize;
            let mut spans = vec![Span::raw(format!("{} ", c.id))];
            for i in 0..bar_width {
                let (ch, color) = if Some(i) == mark {
                    ('│', Color::White)
                } else if i < primary {
                    ('█', Color::Blue)
                } else if i < cells {
                    ('▒', Color::Yellow)
                } else {
                    ('·', Color::DarkGray)
                };
                spans.push(Span::styled(ch.to_string(), Style::new().fg(color)));
            }
            spans.push(Span::raw(format!(
                " {:>3.0}% {:>3.0}% backup",
                c.fraction() * 100.0,
                c.backup_bytes as f64 / got * 100.0
            )));
            lines.push(Line::from(spans));
        }
    }
    if lines.is_empty() {
        lines.push(Line::styled("no scan in the last 30 s", Style::new().fg(Color::DarkGray)));
    }
    let title = "consumers (█ primary, ▒ backup, │ ideal)";
    s.render_widget(Paragraph::new(lines).block(Block::bordered().title(title)), area);
}

/// The last `SPARK_WIDTH` values, scaled to `peak`.
fn sparkline(values: &[f64], peak: f64) -> String {
    let start = values.len().saturating_sub(SPARK_WIDTH);
    values[start..]
        .iter()
        .map(|v| SPARKS[((v / peak) * (SPARKS.len() - 1) as f64).round().clamp(0.0, 7.0) as usize])
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::collect::{ConsumerView, Snapshot};
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;

    fn server(node: u32, fault: Option<&str>) -> ServerView {
        ServerView {
            node,
            addr: format!("127.0.0.1:{}", 7000 + node),
            up: node != 3,
            read_bytes_per_sec: 32e6,
            write_bytes_per_sec: 0.0,
            queued: 2,
            connections: 1,
            disk_bytes_per_sec: Some(32e6),
            disk_model: true,
            fault: fault.map(String::from),
            handed_off: 1,
            taken_over: 0,
            metrics_addr: None,
        }
    }

    #[test]
    fn the_screen_shows_servers_consumers_and_the_ideal() {
        let consumer = |id: &str, done| ConsumerView {
            id: id.into(),
            done_bytes: done,
            total_bytes: 100,
            primary_bytes: done / 2,
            backup_bytes: done / 2,
            from: vec![done, 0, 0, 0],
        };
        let scan = ScanView {
            dataset: "big".into(),
            elapsed: 5.0,
            running: true,
            ideal_seconds: Some(10.0),
            consumers: vec![consumer("abc123", 40), consumer("def456", 60)],
        };
        let snapshot = Snapshot {
            t: 12.0,
            cluster: "c.toml".into(),
            servers: (0..4).map(|n| server(n, (n == 2).then_some("model: rate x0.5"))).collect(),
            scans: vec![scan],
        };
        let frame = crate::make_frame(snapshot, None);
        let mut terminal = Terminal::new(TestBackend::new(100, 20)).unwrap();
        terminal.draw(|s| draw(s, &frame, &[vec![1.0, 32e6]])).unwrap();
        let text: String = terminal.backend().buffer().content().iter().map(|c| c.symbol()).collect();
        for want in
            ["node0", "node3", "down", "rate x0.5", "big: 2 consumers, 5.0 s, ideal 10.0 s", "abc123", "40%", "│"]
        {
            assert!(text.contains(want), "{want:?} missing from the screen:\n{text}");
        }
    }

    #[test]
    fn sparklines_scale_to_the_peak() {
        assert_eq!(sparkline(&[0.0, 50.0, 100.0], 100.0), "▁▅█");
    }
}
