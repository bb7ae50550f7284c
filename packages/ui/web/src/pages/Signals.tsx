/**
 * Send a signal to a run: a wait node of that name completes with the payload (a signal sent
 * before the node is reached is kept until it is). The first signal of a name per run stands.
 */
import { useMutation } from '@tanstack/react-query';
import { type FormEvent, useState } from 'react';
import { Link, useSearchParams } from 'wouter';
import type { SignalResponse } from '../../../src/shared/api.ts';
import { post, seg } from '../api.ts';
import { Card, ErrorBox, PageHeader } from '../components/common.tsx';
import { useMeta } from '../meta.ts';

/** The signals page. */
export function Signals() {
  const meta = useMeta();
  const [params] = useSearchParams();
  const [runId, setRunId] = useState(params.get('run') ?? '');
  const [name, setName] = useState('');
  const [payload, setPayload] = useState('');
  const [parseError, setParseError] = useState<string | null>(null);
  const send = useMutation({
    mutationFn: (body: { runId: string; name: string; payload?: unknown }) =>
      post<SignalResponse>(`/runs/${seg(body.runId)}/signal`, {
        name: body.name,
        ...(body.payload === undefined ? {} : { payload: body.payload }),
      }),
  });

  const onSubmit = (e: FormEvent) => {
    e.preventDefault();
    setParseError(null);
    let value: unknown;
    if (payload.trim()) {
      try {
        value = JSON.parse(payload);
      } catch (err) {
        setParseError(`The payload is not JSON: ${String(err)}`);
        return;
      }
    }
    send.mutate({ runId: runId.trim(), name: name.trim(), payload: value });
  };

  return (
    <div className="page" data-testid="page-signals">
      <PageHeader title="Signals" />
      <p className="muted">
        A signal completes the run's wait node of that name with its payload; sent before the node
        is reached, it is delivered when it is. The first signal of a name per run stands.
      </p>
      {!meta.can.signal ? (
        <p className="notice">
          {meta.readOnly ? 'This UI is read-only.' : 'You may not send signals.'}
        </p>
      ) : (
        <Card>
          <form className="form" onSubmit={onSubmit}>
            <label>
              Run id
              <input
                value={runId}
                onChange={(e) => setRunId(e.target.value)}
                required
                className="mono"
                data-testid="signal-run"
              />
            </label>
            <label>
              Signal name
              <input
                value={name}
                onChange={(e) => setName(e.target.value)}
                required
                data-testid="signal-name"
              />
            </label>
            <label>
              Payload (JSON, optional)
              <textarea
                value={payload}
                onChange={(e) => setPayload(e.target.value)}
                rows={5}
                className="mono"
                placeholder='{ "by": "alice" }'
                data-testid="signal-payload"
              />
            </label>
            <div>
              <button
                type="submit"
                className="primary"
                disabled={send.isPending}
                data-testid="signal-send"
              >
                Send signal
              </button>
            </div>
          </form>
          {parseError ? <div className="error-box">{parseError}</div> : null}
          <ErrorBox error={send.error} />
          {send.data ? (
            <p
              className="notice"
              role="status"
              data-testid="signal-result"
              data-unheard={send.data.accepted && send.data.waitingNodes.length === 0}
            >
              {/* The server's sentence: sent, to which nodes, or that none waits for it. */}
              {send.data.notice} <Link href={`/runs/${seg(send.data.runId)}`}>Open the run</Link>
            </p>
          ) : null}
        </Card>
      )}
    </div>
  );
}
