/**
 * The frame of every page: navigation, the go-to box (run id, submit key or idempotency key), the
 * pause button of live updates, the read-only badge and the user; and the routes.
 */
import { type FormEvent, useState } from 'react';
import { Link, Route, Switch, useLocation } from 'wouter';
import type { LookupHit, LookupResponse } from '../../src/shared/api.ts';
import { ApiFailure, get } from './api.ts';
import { useMeta } from './meta.ts';
import { Limits } from './pages/Limits.tsx';
import { Overview } from './pages/Overview.tsx';
import { RunPage } from './pages/Run.tsx';
import { Runs } from './pages/Runs.tsx';
import { Schedules } from './pages/Schedules.tsx';
import { SettingsPage } from './pages/Settings.tsx';
import { Signals } from './pages/Signals.tsx';
import { Unknown } from './pages/Unknown.tsx';
import { Workers } from './pages/Workers.tsx';
import { useSettings } from './settings.tsx';

function NavLink({ href, children }: { href: string; children: string }) {
  const [location] = useLocation();
  const active = href === '/' ? location === '/' : location.startsWith(href);
  return (
    <Link href={href} className={active ? 'nav-link active' : 'nav-link'}>
      {children}
    </Link>
  );
}

/** Where a lookup hit leads: the run, or the node whose idempotency key it was. */
function hitPath(hit: LookupHit): string {
  const runPath = `/runs/${encodeURIComponent(hit.runId)}`;
  return hit.kind === 'idempotencyKey'
    ? `${runPath}/nodes/${encodeURIComponent(hit.node)}`
    : runPath;
}

/**
 * Resolves what the operator typed with one lookup and opens the run (and node) it names; a
 * submit key used by several workflows lists its runs to choose from.
 */
function GoTo() {
  const [q, setQ] = useState('');
  const [message, setMessage] = useState<string | null>(null);
  const [choices, setChoices] = useState<LookupHit[]>([]);
  const [, navigate] = useLocation();
  const onSubmit = async (e: FormEvent) => {
    e.preventDefault();
    const text = q.trim();
    if (!text) return;
    setMessage(null);
    setChoices([]);
    try {
      const { items } = await get<LookupResponse>('/lookup', { q: text });
      const [first] = items;
      if (items.length === 1 && first) {
        navigate(hitPath(first));
        setQ('');
      } else if (items.length > 1) {
        setChoices(items);
      } else {
        setMessage(`Nothing found for “${text}”`);
      }
    } catch (err) {
      setMessage(
        err instanceof ApiFailure && err.status === 404
          ? `Nothing found for “${text}”`
          : err instanceof Error
            ? err.message
            : String(err),
      );
    }
  };
  return (
    <form className="goto" onSubmit={onSubmit} aria-label="Go to">
      <input
        type="search"
        value={q}
        onChange={(e) => setQ(e.target.value)}
        placeholder="Go to run id, submit key or idempotency key"
        aria-label="Go to run id, submit key or idempotency key"
        data-testid="goto"
      />
      {message ? (
        <span className="goto-message" role="status" data-testid="goto-message">
          {message}
        </span>
      ) : null}
      {choices.length > 0 ? (
        <ul className="goto-choices" data-testid="goto-choices">
          {choices.map((c) => (
            <li key={`${c.runId}-${c.kind}`}>
              <Link
                href={hitPath(c)}
                onClick={() => {
                  setChoices([]);
                  setQ('');
                }}
              >
                {'workflow' in c ? c.workflow : c.node} · <span className="mono">{c.runId}</span>
              </Link>
            </li>
          ))}
        </ul>
      ) : null}
    </form>
  );
}

function PauseButton() {
  const { paused, setPaused } = useSettings();
  return (
    <button
      type="button"
      className={paused ? 'pause paused' : 'pause'}
      onClick={() => setPaused(!paused)}
      aria-pressed={paused}
      title={paused ? 'Live updates paused' : 'Live updates on (paused while the tab is hidden)'}
      data-testid="pause"
    >
      {paused ? '▶ Resume updates' : '❚❚ Pause updates'}
    </button>
  );
}

/** The whole UI. */
export function App() {
  const meta = useMeta();
  return (
    <div className="app">
      <header className="topbar">
        <Link href="/" className="brand">
          Cyclone
        </Link>
        <nav aria-label="Pages">
          <NavLink href="/">Overview</NavLink>
          <NavLink href="/runs">Runs</NavLink>
          <NavLink href="/unknown">Unknown outcomes</NavLink>
          <NavLink href="/workers">Workers</NavLink>
          {meta.features.schedules ? <NavLink href="/schedules">Schedules</NavLink> : null}
          {meta.features.signals ? <NavLink href="/signals">Signals</NavLink> : null}
          {meta.features.limits ? <NavLink href="/limits">Limits</NavLink> : null}
          <NavLink href="/settings">Settings</NavLink>
        </nav>
        <GoTo />
        <div className="topbar-right">
          {meta.readOnly ? (
            <span className="badge readonly" data-testid="read-only">
              read-only
            </span>
          ) : null}
          {meta.user ? <span className="user">{meta.user}</span> : null}
          <PauseButton />
        </div>
      </header>
      <main>
        <Switch>
          <Route path="/" component={Overview} />
          <Route path="/runs" component={Runs} />
          <Route path="/runs/:id/nodes/:node">{(p) => <RunPage id={p.id} node={p.node} />}</Route>
          <Route path="/runs/:id">{(p) => <RunPage id={p.id} />}</Route>
          <Route path="/unknown" component={Unknown} />
          <Route path="/workers" component={Workers} />
          <Route path="/schedules" component={Schedules} />
          <Route path="/signals" component={Signals} />
          <Route path="/limits" component={Limits} />
          <Route path="/settings" component={SettingsPage} />
          <Route>
            <p className="empty">No such page.</p>
          </Route>
        </Switch>
      </main>
      <footer className="footer muted">@cyclone/ui {meta.version}</footer>
    </div>
  );
}
