//! Drawing the TUI state: header (pod, URLs, statuses), the focused pane
//! (ANSI colours, wrap, search highlights) and a footer.

use ansi_to_tui::IntoText;
use omnidev_core::{ServiceState, ServiceStatus, Tone};
use ratatui::Frame;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph};
use unicode_width::UnicodeWidthChar;

use super::app::{App, Mode};
use super::pane::{PaneLine, Pattern};
use omnidev_core::text;

const MATCH: Style = Style::new().add_modifier(Modifier::REVERSED);
const CURRENT_MATCH: Style = Style::new().fg(Color::Black).bg(Color::Yellow);

/// Draws the whole screen and records the pane geometry for paging.
pub fn render(app: &mut App, frame: &mut Frame<'_>) {
    let area = frame.area();
    let header = header_lines(app, area.width as usize);
    let header_rows: Vec<Line<'static>> =
        header.into_iter().flat_map(|l| wrap_line(l, area.width as usize)).collect();
    let header_height = (header_rows.len() as u16).min(area.height.saturating_sub(3));
    let [header_area, body_area, footer_area] = Layout::vertical([
        Constraint::Length(header_height),
        Constraint::Min(1),
        Constraint::Length(1),
    ])
    .areas(area);
    frame.render_widget(Paragraph::new(header_rows), header_area);
    render_body(app, frame, body_area);
    frame.render_widget(Paragraph::new(footer_line(app, area.width as usize)), footer_area);
    inert(frame.buffer_mut());
}

/// The last guard of the screen: a cell that holds a control character
/// (text that reached a widget without going through
/// [`text`]) shows `?` instead of sending it to the terminal.
fn inert(buffer: &mut ratatui::buffer::Buffer) {
    for cell in &mut buffer.content {
        if cell.symbol().chars().any(text::obeyed) {
            cell.set_symbol("?");
        }
    }
}

/// The colour of the service at `index`: the headless printer's
/// ([`crate::output::SERVICE_STYLES`]).
fn service_colour(index: usize) -> Color {
    let style = crate::output::SERVICE_STYLES[index % crate::output::SERVICE_STYLES.len()];
    style.get_fg_color().map_or(Color::Reset, Color::from)
}

fn state_style(state: &ServiceState) -> Style {
    match state.tone() {
        Tone::Good => Style::new().fg(Color::Green),
        Tone::Up => Style::new().fg(Color::Cyan),
        Tone::Busy => Style::new().fg(Color::Yellow),
        Tone::Trouble => Style::new().fg(Color::LightRed),
        Tone::Bad => Style::new().fg(Color::Red).add_modifier(Modifier::BOLD),
        Tone::Quiet => Style::new().fg(Color::DarkGray),
    }
}

fn header_lines(app: &App, width: usize) -> Vec<Line<'static>> {
    let dim = Style::new().fg(Color::DarkGray);
    let mut first = vec![
        Span::styled("omnidev", Style::new().add_modifier(Modifier::BOLD)),
        Span::styled("  pod ", dim),
        Span::raw(text::quote_path(&app.info.pod_dir)),
    ];
    if let Some(usage) = &app.info.usage {
        first.push(Span::styled("  uses ", dim));
        first.push(Span::raw(crate::output::usage(usage)));
    }
    // URLs get a line of their own so a narrow terminal does not break one.
    let mut urls = Vec::new();
    for url in &app.info.urls {
        let lead = if urls.is_empty() { "" } else { "  " };
        urls.push(Span::styled(format!("{lead}{} ", text::quote(&url.name)), dim));
        urls.push(Span::styled(
            text::quote(&url.url).into_owned(),
            Style::new().add_modifier(Modifier::UNDERLINED),
        ));
    }
    let tabs = tabs_line(app, width);
    let mut lines = vec![Line::from(first)];
    if !urls.is_empty() {
        lines.push(Line::from(urls));
    }
    lines.push(tabs);
    lines
}

/// How much a tab tells: everything, the state's word, or its icon.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TabDetail {
    Full,
    Word,
    Icon,
}

/// The tab line: ` 0 all ` and one tab per service, as detailed as the
/// width allows. Tabs lose detail first (pid and restarts, then the state
/// word for an icon); if even that does not fit, whole tabs are left out
/// (never the focused one) and `+N` says how many.
fn tabs_line(app: &App, width: usize) -> Line<'static> {
    let focused = |i: usize| {
        if app.focus == i {
            Style::new().add_modifier(Modifier::REVERSED | Modifier::BOLD)
        } else {
            Style::new()
        }
    };
    let build = |detail: TabDetail| -> Vec<Vec<Span<'static>>> {
        let mut tabs = vec![vec![Span::styled(" 0 all ", focused(0))]];
        for (i, service) in app.services.iter().enumerate() {
            tabs.push(service_tab(i, service, focused(i + 1), detail));
        }
        tabs
    };
    let tab_width = |tab: &Vec<Span<'static>>| tab.iter().map(Span::width).sum::<usize>();
    let units_width = |tabs: &[Vec<Span<'static>>]| {
        tabs.iter().map(tab_width).sum::<usize>() + tabs.len().saturating_sub(1)
    };
    for detail in [TabDetail::Full, TabDetail::Word, TabDetail::Icon] {
        let tabs = build(detail);
        if width == 0 || units_width(&tabs) <= width {
            return join_tabs(tabs);
        }
    }
    // Whole tabs, in order, keeping the focused one and room for `+N`.
    let tabs = build(TabDetail::Icon);
    let room = width.saturating_sub(4);
    let mut used = tab_width(&tabs[app.focus.min(tabs.len() - 1)]);
    let mut keep = vec![false; tabs.len()];
    keep[app.focus.min(tabs.len() - 1)] = true;
    for (i, tab) in tabs.iter().enumerate() {
        if !keep[i] && used + 1 + tab_width(tab) <= room {
            used += 1 + tab_width(tab);
            keep[i] = true;
        }
    }
    let left_out = keep.iter().filter(|k| !**k).count();
    let mut shown: Vec<Vec<Span<'static>>> =
        tabs.into_iter().zip(keep).filter_map(|(tab, keep)| keep.then_some(tab)).collect();
    shown.push(vec![Span::styled(format!("+{left_out}"), Style::new().fg(Color::DarkGray))]);
    join_tabs(shown)
}

fn join_tabs(tabs: Vec<Vec<Span<'static>>>) -> Line<'static> {
    let mut spans = Vec::new();
    for (i, tab) in tabs.into_iter().enumerate() {
        if i > 0 {
            spans.push(Span::raw(" "));
        }
        spans.extend(tab);
    }
    Line::from(spans)
}

/// One glyph per state, for the narrowest tabs.
fn state_icon(state: &ServiceState) -> &'static str {
    match (state, state.tone()) {
        (ServiceState::Running { .. }, _) => "●",
        (ServiceState::Stopping { .. }, _) => "◌",
        (_, Tone::Good) => "✓",
        (_, Tone::Up | Tone::Busy) => "…",
        (_, Tone::Trouble) => "↻",
        (_, Tone::Bad) => "✗",
        (_, Tone::Quiet) => "■",
    }
}

fn service_tab(
    index: usize,
    service: &ServiceStatus,
    base: Style,
    detail: TabDetail,
) -> Vec<Span<'static>> {
    let state = match detail {
        TabDetail::Full => service.label(),
        TabDetail::Word => service.state.word().to_owned(),
        TabDetail::Icon => state_icon(&service.state).to_owned(),
    };
    let mut spans = vec![
        Span::styled(format!(" {} ", index + 1), base),
        Span::styled(
            service.name.clone(),
            base.fg(service_colour(index)).add_modifier(Modifier::BOLD),
        ),
        Span::styled(" ", base),
        Span::styled(state, base.patch(state_style(&service.state))),
    ];
    if service.restarts > 0 && detail == TabDetail::Full {
        spans.push(Span::styled(format!(" ↻{}", service.restarts), base.fg(Color::LightRed)));
    }
    spans.push(Span::styled(" ", base));
    spans
}

/// The key help after `q`, longest first: the footer shows the longest
/// that fits, so every key stays listed on a narrow terminal.
const KEY_HELP: [&str; 5] = [
    "0-9/Tab pane  ↑↓ PgUp PgDn j k d u g G scroll  f follow  / ? n N search  w wrap  t time  r restart  s stop/start  R reload watched  P apply profile  c clear",
    "0-9/Tab pane  ↑↓ jkdugG scroll  f follow  /?nN search  w wrap  r restart  s stop/start  R reload  c clear",
    "0-9 pane ↑↓ scroll f follow / find w wrap r restart s stop/start R reload c clear",
    "0-9 ↑↓ f:follow /:find w:wrap r:restart s:stop/start R:reload c:clr",
    "0-9 ↑↓ f:flw /:find w:wrap r:rst s:stop R:rld c:clr",
];

/// `q` in the key help of each length: in `omnidev up` it stops the pod,
/// attached (`omnidev attach`) it leaves the pod running.
const QUIT_HELP: [(&str, &str); 5] = [
    ("q quit", "q detach · pod keeps running"),
    ("q quit", "q detach (pod keeps running)"),
    ("q quit", "q detach"),
    ("q:quit", "q:detach"),
    ("q:quit", "q:detach"),
];

/// The key help of each length, longest first, for `up`'s own UI or an
/// attached one.
fn key_help(attached: bool) -> [String; 5] {
    std::array::from_fn(|i| {
        let (up, attach) = QUIT_HELP[i];
        let quit = if attached { attach } else { up };
        let gap = if i < 2 { "  " } else { " " };
        format!("{quit}{gap}{}", KEY_HELP[i])
    })
}

fn footer_line(app: &App, width: usize) -> Line<'static> {
    let dim = Style::new().fg(Color::DarkGray);
    if let Mode::Search { direction, input } = &app.mode {
        let prompt = match direction {
            super::pane::Direction::Forward => "/",
            super::pane::Direction::Backward => "?",
        };
        return Line::from(vec![
            Span::styled(prompt.to_owned(), Style::new().add_modifier(Modifier::BOLD)),
            Span::raw(input.clone()),
            Span::styled("█", dim),
        ]);
    }
    if let Some(message) = &app.message {
        return Line::from(Span::styled(message.clone(), Style::new().fg(Color::Yellow)));
    }
    // A changed profile waiting to be applied comes first: its key is
    // the one to press now.
    let mut spans = Vec::new();
    let mut width = width;
    if let Some(what) = &app.profile_pending {
        let pending = format!("P apply profile ({}) │ ", omnidev_core::text::message(what));
        width = width.saturating_sub(unicode_width::UnicodeWidthStr::width(pending.as_str()));
        spans.push(Span::styled(pending, Style::new().fg(Color::Yellow)));
    }
    let [.., narrowest] = key_help(app.attached);
    let help = key_help(app.attached)
        .into_iter()
        .find(|help| unicode_width::UnicodeWidthStr::width(help.as_str()) <= width)
        .unwrap_or(narrowest);
    spans.push(Span::styled(help, dim));
    Line::from(spans)
}

fn render_body(app: &mut App, frame: &mut Frame<'_>, area: Rect) {
    let focus = app.focus;
    let title = format!(" {} {} ", focus, app.pane_title(focus));
    let pane = &app.panes[focus];
    let mut flags = vec![if pane.follow { "follow" } else { "paused" }];
    if app.wrap {
        flags.push("wrap");
    }
    if app.timestamps {
        flags.push("time");
    }
    let block = Block::new()
        .borders(Borders::TOP)
        .border_style(Style::new().fg(Color::DarkGray))
        .title(Span::styled(title, Style::new().add_modifier(Modifier::BOLD)))
        .title(
            Line::from(Span::styled(format!(" {} ", flags.join(" · ")), Style::new()))
                .right_aligned(),
        );
    let inner = block.inner(area);
    frame.render_widget(block, area);

    let height = inner.height as usize;
    let width = inner.width as usize;
    let tag_width = if focus == 0 {
        app.services
            .iter()
            .map(|s| s.name.len())
            .chain(std::iter::once("omnidev".len()))
            .max()
            .unwrap_or(0)
    } else {
        0
    };
    let colour_of = |tag: &str| {
        app.services.iter().position(|s| s.name == tag).map_or(Color::DarkGray, service_colour)
    };
    let pattern = app.pattern.clone();
    let wrap = app.wrap;
    let stamps = app.timestamps;
    let pane = &app.panes[focus];
    let current = pane.current_match;
    let build = |abs: u64, line: &PaneLine| -> Vec<Line<'static>> {
        let styled = styled_line(
            line,
            stamps,
            (focus == 0).then(|| (tag_width, colour_of(&line.tag))),
            pattern.as_ref(),
            current == Some(abs),
        );
        if wrap { wrap_line(styled, width) } else { vec![styled] }
    };

    // Every line gives a row at least: `height` lines fill the view.
    let mut rows: Vec<Line<'static>> = Vec::new();
    let mut shown = Vec::new();
    if pane.follow {
        for (abs, line) in pane.last(app.output.history(), height).iter().rev() {
            if rows.len() >= height {
                break;
            }
            let mut older = build(*abs, line);
            older.append(&mut rows);
            rows = older;
            shown.push(*abs);
        }
        shown.reverse();
        rows.drain(..rows.len().saturating_sub(height));
    } else {
        for (abs, line) in &pane.from(app.output.history(), pane.top(), height) {
            if rows.len() >= height {
                break;
            }
            rows.extend(build(*abs, line));
            shown.push(*abs);
        }
        rows.truncate(height);
    }
    let pane = &mut app.panes[focus];
    pane.view_height = height;
    pane.view_top = shown.first().copied().unwrap_or(pane.top());
    pane.view_bottom = shown.last().copied().unwrap_or(pane.view_top);
    frame.render_widget(Paragraph::new(rows), inner);
}

/// One pane line as styled spans: optional time and service tag, the text
/// with its ANSI colours (supervisor lines dimmed), search matches
/// highlighted.
fn styled_line(
    line: &PaneLine,
    stamp: bool,
    tag: Option<(usize, Color)>,
    pattern: Option<&Pattern>,
    is_current: bool,
) -> Line<'static> {
    let mut content: Vec<Span<'static>> = if line.supervisor {
        vec![Span::styled(
            line.plain().into_owned(),
            Style::new().fg(Color::DarkGray).add_modifier(Modifier::ITALIC),
        )]
    } else if line.raw.contains('\x1b') {
        match line.raw.as_bytes().into_text() {
            Ok(text) => text
                .lines
                .into_iter()
                .flat_map(|l| {
                    let line_style = l.style;
                    l.spans
                        .into_iter()
                        .map(move |s| Span::styled(s.content, line_style.patch(s.style)))
                })
                .collect(),
            Err(_) => vec![Span::raw(line.plain().into_owned())],
        }
    } else {
        vec![Span::raw(line.raw.clone())]
    };
    for span in &mut content {
        if span.content.chars().any(char::is_control) {
            span.content =
                span.content.replace('\t', "    ").replace(|c: char| c.is_control(), "").into();
        }
    }
    if let Some(pattern) = pattern {
        let plain: String = content.iter().map(|s| s.content.as_ref()).collect();
        let ranges = pattern.find_all(&plain);
        if !ranges.is_empty() {
            let style = if is_current { CURRENT_MATCH } else { MATCH };
            content = highlight(content, &ranges, style);
        }
    }
    let mut spans = Vec::with_capacity(content.len() + 3);
    if stamp {
        spans.push(Span::styled(
            format!("{} ", crate::output::clock(line.at)),
            Style::new().fg(Color::DarkGray),
        ));
    }
    if let Some((width, colour)) = tag {
        spans.push(Span::styled(format!("{:<width$}", line.tag), Style::new().fg(colour)));
        spans.push(Span::styled(" │ ", Style::new().fg(Color::DarkGray)));
    }
    spans.extend(content);
    Line::from(spans)
}

/// Splits spans at the byte `ranges` of their concatenated text and patches
/// `style` onto the pieces inside them.
fn highlight(
    spans: Vec<Span<'static>>,
    ranges: &[std::ops::Range<usize>],
    style: Style,
) -> Vec<Span<'static>> {
    let mut out = Vec::new();
    let mut offset = 0;
    for span in spans {
        let text = span.content.as_ref();
        let start = offset;
        let end = offset + text.len();
        offset = end;
        // Cut points inside this span.
        let mut cuts = vec![start, end];
        for r in ranges {
            for p in [r.start, r.end] {
                if p > start && p < end && text.is_char_boundary(p - start) {
                    cuts.push(p);
                }
            }
        }
        cuts.sort_unstable();
        cuts.dedup();
        for pair in cuts.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            let piece = text[a - start..b - start].to_owned();
            let inside = ranges.iter().any(|r| r.start <= a && b <= r.end);
            let piece_style = if inside { span.style.patch(style) } else { span.style };
            out.push(Span::styled(piece, piece_style));
        }
    }
    out
}

/// Breaks a line into rows of at most `width` terminal cells.
fn wrap_line(line: Line<'static>, width: usize) -> Vec<Line<'static>> {
    if width == 0 || line.width() <= width {
        return vec![line];
    }
    let mut rows = Vec::new();
    let mut row: Vec<Span<'static>> = Vec::new();
    let mut used = 0;
    for span in line.spans {
        let mut piece = String::new();
        for c in span.content.chars() {
            let w = c.width().unwrap_or(0);
            if used + w > width && used > 0 {
                if !piece.is_empty() {
                    row.push(Span::styled(std::mem::take(&mut piece), span.style));
                }
                rows.push(Line::from(std::mem::take(&mut row)));
                used = 0;
            }
            piece.push(c);
            used += w;
        }
        if !piece.is_empty() {
            row.push(Span::styled(piece, span.style));
        }
    }
    if !row.is_empty() {
        rows.push(Line::from(row));
    }
    rows
}

#[cfg(test)]
pub(crate) mod tests {
    use std::path::PathBuf;
    use std::time::SystemTime;

    use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
    use omnidev_core::{Event, EventKind, ExitStatus};
    use ratatui::Terminal;
    use ratatui::backend::TestBackend;

    use super::*;
    use crate::tui::app::PodInfo;
    use crate::tui::app::tests::{log, status};

    fn state(service: &str, state: ServiceState) -> Event {
        Event {
            at: SystemTime::UNIX_EPOCH,
            service: Some(service.into()),
            kind: EventKind::State { state },
        }
    }

    fn sample_app() -> App {
        let mut app = App::new(
            PodInfo {
                pod_dir: PathBuf::from("/home/dev/.cache/omnidev/omnigent-1a2b3c4d"),
                // vite has crashed: core shows no URL of it.
                urls: vec![crate::control::protocol::UrlReport {
                    name: "server".into(),
                    url: "http://localhost:6767".into(),
                    service: Some("server".into()),
                }],
                usage: None,
            },
            vec!["server".into(), "host".into(), "vite".into()],
            vec!["server".into()],
        );
        app.apply(&state("server", ServiceState::Ready { pid: 4242 }));
        app.apply(&state("host", ServiceState::Running { pid: 4250 }));
        app.apply(&Event {
            at: SystemTime::UNIX_EPOCH,
            service: Some("vite".into()),
            kind: EventKind::Crashed {
                status: ExitStatus::Code(1),
                attempt: 1,
                backoff: std::time::Duration::from_secs(1),
            },
        });
        app.apply(&state("vite", ServiceState::Exited { status: ExitStatus::Code(1) }));
        let exited = ServiceState::Exited { status: ExitStatus::Code(1) };
        app.apply_snapshot(&[
            status("server", ServiceState::Ready { pid: 4242 }, 0),
            status("host", ServiceState::Running { pid: 4250 }, 0),
            status("vite", exited, 1),
        ]);
        let mut seq = 0;
        let mut next = || {
            seq += 1;
            seq
        };
        app.apply(&log("server", "INFO:     Started server process", next()));
        app.apply(&log(
            "server",
            "\x1b[32mINFO\x1b[0m:     Uvicorn running on http://127.0.0.1:6767",
            next(),
        ));
        app.apply(&log("host", "host connected to server", next()));
        app.apply(&log("vite", "\x1b[31merror\x1b[0m: port 5173 is busy", next()));
        app.apply(&log("server", "GET /health 200", next()));
        app
    }

    pub(crate) fn draw(app: &mut App, width: u16, height: u16) -> Terminal<TestBackend> {
        let mut terminal = Terminal::new(TestBackend::new(width, height)).expect("terminal");
        terminal.draw(|f| render(app, f)).expect("draw");
        terminal
    }

    #[test]
    fn services_are_coloured_as_the_headless_printer_colours_them() {
        let tui: Vec<Color> = (0..7).map(service_colour).collect();
        assert_eq!(
            tui,
            [
                Color::Cyan,
                Color::Magenta,
                Color::Yellow,
                Color::Green,
                Color::Blue,
                Color::LightRed,
                Color::Cyan,
            ]
        );
    }

    #[test]
    fn combined_pane_with_header() {
        let mut app = sample_app();
        let terminal = draw(&mut app, 100, 14);
        insta::assert_snapshot!(terminal.backend());
    }

    #[test]
    fn a_changed_profile_puts_its_key_first_in_the_footer() {
        let mut app = sample_app();
        app.profile_pending = Some("server +worker".into());
        let terminal = draw(&mut app, 100, 14);
        let footer: String =
            (0..100).map(|x| terminal.backend().buffer()[(x, 13)].symbol().to_owned()).collect();
        let footer = footer.trim_end();
        assert!(footer.starts_with("P apply profile (server +worker) │ q"), "{footer:?}");
        // The key help after it is whole, the one that fits what is left.
        let help = footer.split(" │ ").nth(1).expect("help");
        assert!(key_help(false).iter().any(|h| h == help), "{help:?}");
    }

    #[test]
    fn service_pane() {
        let mut app = sample_app();
        app.handle_key(KeyEvent::new(KeyCode::Char('1'), KeyModifiers::NONE));
        let terminal = draw(&mut app, 100, 10);
        insta::assert_snapshot!(terminal.backend());
    }

    #[test]
    fn wrapped_long_line() {
        let mut app = sample_app();
        app.apply(&log("host", &"x".repeat(150), 100));
        app.handle_key(KeyEvent::new(KeyCode::Char('2'), KeyModifiers::NONE));
        app.handle_key(KeyEvent::new(KeyCode::Char('w'), KeyModifiers::NONE));
        let terminal = draw(&mut app, 60, 10);
        insta::assert_snapshot!(terminal.backend());
    }

    #[test]
    fn search_highlight() {
        let mut app = sample_app();
        let mut terminal = draw(&mut app, 80, 12);
        for c in "/info".chars() {
            app.handle_key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE));
        }
        app.handle_key(KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE));
        terminal.draw(|f| render(&mut app, f)).expect("draw");
        let buffer = terminal.backend().buffer();
        // Row of the first match ("INFO:     Started…"): the current match
        // is yellow; the second INFO (coloured green by ANSI) is reversed.
        let find_row = |needle: &str| {
            (0..buffer.area.height)
                .find(|&y| {
                    (0..buffer.area.width)
                        .map(|x| buffer[(x, y)].symbol())
                        .collect::<String>()
                        .contains(needle)
                })
                .expect("row on screen")
        };
        let first = find_row("Started server");
        let second = find_row("Uvicorn running");
        let col = |y: u16| {
            (0..buffer.area.width).find(|&x| buffer[(x, y)].symbol() == "I").expect("an I")
        };
        assert_eq!(buffer[(col(first), first)].bg, Color::Yellow);
        let second_cell = &buffer[(col(second), second)];
        assert!(second_cell.modifier.contains(Modifier::REVERSED));
        assert_eq!(second_cell.fg, Color::Green);
        insta::assert_snapshot!(terminal.backend());
    }

    #[test]
    fn service_escapes_are_drawn_as_visible_text() {
        let mut app = sample_app();
        app.apply(&log(
            "host",
            "t\x1b]0;TITLE\x07 c\x1b[2J q\x1b[6n f\rserver | x \x1b[31mred\x1b[0m",
            100,
        ));
        app.handle_key(KeyEvent::new(KeyCode::Char('2'), KeyModifiers::NONE));
        let terminal = draw(&mut app, 100, 10);
        let screen = screen_rows(&terminal).join("\n");
        assert!(screen.contains("t^[]0;TITLE^G c^[[2J q^[[6n f^Mserver | x red"), "{screen}");
        assert!(!screen.contains('\x1b'), "{screen}");
    }

    /// A pod directory (the checkout's name) and URLs (`--host` values)
    /// holding escape sequences are shown, never obeyed; no cell of the
    /// screen holds a control character, whatever a widget was given.
    #[test]
    fn names_in_the_header_are_shown_not_obeyed() {
        let mut app = sample_app();
        app.info.pod_dir = PathBuf::from("/cache/re\x1b]0;t\x07po\n-1a2b3c4d");
        app.info.urls[0].url = "http://\x1b[2J:6767".into();
        let terminal = draw(&mut app, 100, 10);
        let screen = screen_rows(&terminal).join("\n");
        assert!(screen.contains("/cache/re^[]0;t^Gpo^J-1a2b3c4d"), "{screen}");
        assert!(screen.contains("http://^[[2J:6767"), "{screen}");
        let mut buffer = ratatui::buffer::Buffer::empty(ratatui::layout::Rect::new(0, 0, 3, 1));
        buffer.content[1].set_symbol("\x1b");
        inert(&mut buffer);
        assert_eq!(buffer.content[1].symbol(), "?");
    }

    #[test]
    fn a_hyperlink_keeps_its_text_and_the_rest_of_the_line_and_search_finds_it() {
        let mut app = sample_app();
        app.apply(&log(
            "host",
            "ansi-link: \x1b]8;;https://example.com/docs\x1b\\the docs\x1b]8;;\x1b\\ and the rest",
            100,
        ));
        app.handle_key(KeyEvent::new(KeyCode::Char('2'), KeyModifiers::NONE));
        for c in "/docs and the".chars() {
            app.handle_key(KeyEvent::new(KeyCode::Char(c), KeyModifiers::NONE));
        }
        app.handle_key(KeyEvent::new(KeyCode::Enter, KeyModifiers::NONE));
        assert_eq!(app.message, None, "the search found the link's text");
        let terminal = draw(&mut app, 100, 10);
        let screen = screen_rows(&terminal).join("\n");
        assert!(screen.contains("ansi-link: the docs and the rest"), "{screen}");
        assert!(!screen.contains("example.com"), "{screen}");
    }

    pub(crate) fn screen_rows(terminal: &Terminal<TestBackend>) -> Vec<String> {
        let buffer = terminal.backend().buffer();
        (0..buffer.area.height)
            .map(|y| (0..buffer.area.width).map(|x| buffer[(x, y)].symbol()).collect::<String>())
            .collect()
    }

    /// `t` starts each line with the time its output was read, in the
    /// combined pane and a service's; `t` again takes it away.
    #[test]
    fn t_shows_each_lines_time() {
        let mut app = sample_app();
        let at = SystemTime::now() - std::time::Duration::from_secs(3 * 3600 + 7);
        let mut event = log("server", "stamped line", 99);
        if let EventKind::Log { line } = &mut event.kind {
            line.at = at;
        }
        app.apply(&event);
        let clock = crate::output::clock(at);
        let row = |app: &mut App| {
            let terminal = draw(app, 100, 20);
            screen_rows(&terminal)
                .into_iter()
                .find(|row| row.contains("stamped line"))
                .expect("the line on screen")
        };
        assert!(!row(&mut app).contains(&clock));
        app.handle_key(crate::tui::app::tests::key('t'));
        let shown = row(&mut app);
        assert!(shown.trim_start().starts_with(&format!("{clock} server")), "{shown}");
        app.handle_key(crate::tui::app::tests::key('1'));
        assert!(row(&mut app).trim_start().starts_with(&format!("{clock} stamped line")));
        app.handle_key(crate::tui::app::tests::key('t'));
        assert!(!row(&mut app).contains(&clock));
    }

    #[test]
    fn small_terminals_keep_whole_tabs_and_every_key() {
        for (width, height) in [(80, 24), (60, 20)] {
            let mut app = sample_app();
            let terminal = draw(&mut app, width, height);
            let rows = screen_rows(&terminal);
            let tabs = rows.iter().find(|row| row.contains(" 0 all ")).expect("a tab row");
            for tab in ["1 server ready", "2 host running", "3 vite crashed"] {
                assert!(tabs.contains(tab), "{width}x{height}: {tabs:?}");
            }
            let footer = rows.last().expect("rows").trim_end();
            assert!(
                key_help(false).iter().any(|help| help == footer),
                "{width}x{height}: the footer is one whole key help: {footer:?}"
            );
            insta::assert_snapshot!(format!("tui_{width}x{height}"), terminal.backend());
        }
    }

    /// Every key is listed at every width, `s` among them; `q` says what it
    /// does: in `up` it quits (stopping the pod), attached it leaves the
    /// pod running.
    #[test]
    fn the_footer_lists_every_key_and_says_what_q_does() {
        for attached in [false, true] {
            let mut app = sample_app();
            app.attached = attached;
            for width in [200, 120, 100, 80, 70, 60] {
                let terminal = draw(&mut app, width, 12);
                let rows = screen_rows(&terminal);
                let footer = rows.last().expect("rows").trim_end().to_owned();
                assert!(
                    key_help(attached).contains(&footer),
                    "{width}: one whole key help: {footer:?}"
                );
                assert!(
                    footer.contains(" s stop/start ") || footer.contains(" s:stop"),
                    "{width}: {footer:?}"
                );
                for key in ["0-9", "f", "w", "r", "R", "c"] {
                    assert!(
                        footer.split([' ', ':']).any(|word| word == key || word.starts_with(key)),
                        "{width}: no {key} in {footer:?}"
                    );
                }
                let quit = if attached { "detach" } else { "quit" };
                assert!(
                    footer.starts_with(&format!("q {quit}"))
                        || footer.starts_with(&format!("q:{quit}")),
                    "{width}: {footer:?}"
                );
            }
        }
        let widest = &key_help(true)[0];
        assert!(widest.starts_with("q detach · pod keeps running  "), "{widest}");
        insta::assert_snapshot!("key_help_up", key_help(false).join("\n"));
        insta::assert_snapshot!("key_help_attached", key_help(true).join("\n"));
    }

    #[test]
    fn tabs_too_many_for_the_width_are_left_out_whole_keeping_the_focused_one() {
        let mut app = sample_app();
        app.handle_key(KeyEvent::new(KeyCode::Char('3'), KeyModifiers::NONE));
        let tabs = tabs_line(&app, 34).to_string();
        assert_eq!(tabs, " 0 all   2 host ●   3 vite ✗  +1");
        let tabs = tabs_line(&app, 24).to_string();
        assert_eq!(tabs, " 0 all   3 vite ✗  +2", "the focused tab stays");
        assert!(unicode_width::UnicodeWidthStr::width(tabs.as_str()) <= 24, "{tabs:?}");
        // Every tab shown is whole: a name is never cut.
        for name in ["server", "host"] {
            let cut = (1..name.len()).any(|n| tabs.contains(&format!(" {} ", &name[..n])));
            assert!(!cut, "{tabs:?}");
        }
    }

    #[test]
    fn wrap_line_splits_at_width() {
        let rows = wrap_line(Line::from(vec![Span::raw("abcd"), Span::raw("efg")]), 3);
        let texts: Vec<String> = rows.iter().map(ToString::to_string).collect();
        assert_eq!(texts, ["abc", "def", "g"]);
    }
}
