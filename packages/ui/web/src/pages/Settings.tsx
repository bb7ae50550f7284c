/**
 * The operator's settings, kept in this browser: theme, how times show, how often pages refresh,
 * whether payloads are hidden until asked for.
 */
import { PageHeader } from '../components/common.tsx';
import { formatTime } from '../format.tsx';
import { useMeta } from '../meta.ts';
import { type Theme, type TimeMode, useSettings } from '../settings.tsx';

const INTERVALS: [string, number][] = [
  ['1 s', 1_000],
  ['2 s', 2_000],
  ['3 s', 3_000],
  ['5 s', 5_000],
  ['10 s', 10_000],
  ['30 s', 30_000],
  ['off', 0],
];

function Choice<T extends string>({
  name,
  value,
  options,
  onChange,
}: {
  name: string;
  value: T;
  options: [T, string][];
  onChange: (v: T) => void;
}) {
  return (
    <fieldset className="choice">
      <legend>{name}</legend>
      {options.map(([v, label]) => (
        <label key={v}>
          <input
            type="radio"
            name={name}
            value={v}
            checked={value === v}
            onChange={() => onChange(v)}
            data-testid={`${name.toLowerCase().replace(/\W+/g, '-')}-${v}`}
          />
          {label}
        </label>
      ))}
    </fieldset>
  );
}

/** The settings page. */
export function SettingsPage() {
  const { settings, update, paused, setPaused } = useSettings();
  const meta = useMeta();
  const sample = new Date(Date.now() - 90_000).toISOString();
  return (
    <div className="page narrow" data-testid="page-settings">
      <PageHeader title="Settings" />
      <Choice<Theme>
        name="Theme"
        value={settings.theme}
        options={[
          ['system', 'as the system'],
          ['light', 'light'],
          ['dark', 'dark'],
        ]}
        onChange={(theme) => update({ theme })}
      />
      <Choice<TimeMode>
        name="Times"
        value={settings.time}
        options={[
          ['local', `local (${Intl.DateTimeFormat().resolvedOptions().timeZone})`],
          ['utc', 'UTC'],
          ['relative', 'relative'],
        ]}
        onChange={(time) => update({ time })}
      />
      <p className="muted small">
        Example: {formatTime(sample, settings.time)} — the exact UTC time is in every time's
        tooltip.
      </p>
      <fieldset className="choice">
        <legend>Refresh</legend>
        <label>
          every{' '}
          <select
            value={settings.refreshMs}
            onChange={(e) => update({ refreshMs: Number(e.target.value) })}
            data-testid="refresh-interval"
          >
            {INTERVALS.map(([label, ms]) => (
              <option key={ms} value={ms}>
                {label}
              </option>
            ))}
          </select>
        </label>
        <label>
          <input type="checkbox" checked={paused} onChange={(e) => setPaused(e.target.checked)} />
          paused (until the page is reloaded)
        </label>
        <p className="muted small">Pages never refresh while the tab is hidden.</p>
      </fieldset>
      <fieldset className="choice">
        <legend>Payloads</legend>
        <label>
          <input
            type="checkbox"
            checked={settings.hidePayloads}
            onChange={(e) => update({ hidePayloads: e.target.checked })}
          />
          hide inputs and outputs until asked for
        </label>
      </fieldset>
      <p className="muted small">
        @cyclone/ui {meta.version} · {meta.readOnly ? 'read-only' : 'read-write'}
        {meta.user ? ` · signed in as ${meta.user}` : ''}
      </p>
    </div>
  );
}
