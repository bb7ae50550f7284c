/**
 * A JSON value from the API (`Payload`: raw JSON text, maybe only a preview). A whole value is
 * parsed with integers beyond 2^53 kept exact (as BigInt, from the number's source text) and shown
 * as a collapsible tree; a preview (the server cut it) is shown as text with its size and a
 * download link, so a 5 MB output never reaches the page in full.
 */
import { useMemo, useState } from 'react';
import { darkStyles, defaultStyles, JsonView } from 'react-json-view-lite';
import 'react-json-view-lite/dist/index.css';
import type { Payload } from '../../../src/shared/api.ts';
import { formatBytes } from '../format.tsx';
import { useSettings } from '../settings.tsx';

/** Above this many bytes a whole value still shows as text first (a tree of it is on request). */
const TREE_MAX = 256 * 1024;

type Reviver = (
  this: unknown,
  key: string,
  value: unknown,
  context?: { source?: string },
) => unknown;

/** JSON.parse keeping integers beyond 2^53 exact (the reviver's `context.source`, ES2025). */
export function parseExact(text: string): unknown {
  const reviver: Reviver = (_key, value, context) => {
    if (
      typeof value === 'number' &&
      Number.isInteger(value) &&
      !Number.isSafeInteger(value) &&
      context?.source &&
      /^-?\d+$/.test(context.source)
    ) {
      return BigInt(context.source);
    }
    return value;
  };
  return JSON.parse(text, reviver as (key: string, value: unknown) => unknown);
}

/** A payload with its size; `downloadHref` (relative to the base) offers the full value. */
export function PayloadView({
  payload,
  downloadHref,
  label,
}: {
  payload: Payload | null | undefined;
  downloadHref?: string;
  label: string;
}) {
  const { settings } = useSettings();
  const [shown, setShown] = useState(!settings.hidePayloads);
  const [asText, setAsText] = useState(false);
  const parsed = useMemo(() => {
    if (!payload || payload.truncated || payload.hidden) return undefined;
    try {
      return { value: parseExact(payload.text) };
    } catch {
      return undefined;
    }
  }, [payload]);

  if (!payload) return <p className="muted">No {label}.</p>;
  if (payload.hidden) return <p className="muted">The {label} is hidden by the server.</p>;

  const dark = document.documentElement.dataset.theme === 'dark';
  const isTree =
    parsed !== undefined &&
    typeof parsed.value === 'object' &&
    parsed.value !== null &&
    payload.bytes <= TREE_MAX &&
    !asText;

  return (
    <div className="payload" data-testid={`payload-${label}`}>
      <div className="payload-bar">
        <span className="muted">
          {formatBytes(payload.bytes)}
          {payload.truncated ? ' — preview of the first part only' : ''}
        </span>
        {!shown ? (
          <button type="button" onClick={() => setShown(true)}>
            Show {label}
          </button>
        ) : null}
        {shown && parsed && typeof parsed.value === 'object' ? (
          <button type="button" onClick={() => setAsText(!asText)}>
            {asText ? 'Tree' : 'Text'}
          </button>
        ) : null}
        {downloadHref ? (
          <a href={downloadHref} download data-testid={`download-${label}`}>
            Download {label}
          </a>
        ) : null}
      </div>
      {!shown ? null : isTree ? (
        <div className="json-tree">
          <JsonView
            data={parsed.value as object}
            shouldExpandNode={(level) => level < 2}
            style={dark ? darkStyles : defaultStyles}
          />
        </div>
      ) : (
        <pre className="json-text" data-truncated={payload.truncated}>
          {payload.truncated ? `${payload.text}\n…` : payload.text}
        </pre>
      )}
    </div>
  );
}
