/**
 * Small shared pieces: state badges (an icon and the word, never colour alone), the error box
 * that explains API failures, the confirm dialog of every action, page headers and empty states.
 */
import { type ReactNode, useEffect, useRef } from 'react';
import { RETRY_NOTICE, type RunState, type StepState } from '../../../src/shared/api.ts';
import { ApiFailure } from '../api.ts';

const ICON: Record<string, string> = {
  running: '▶',
  completed: '✓',
  failed: '✕',
  cancelled: '⊘',
  pending: '…',
  available: '○',
  scheduled: '◷',
  retryable: '↻',
  skipped: '↷',
  discarded: '✕',
};

/** A run or step state as icon + word, coloured by the `state-<name>` class. */
export function StateBadge({ state }: { state: RunState | StepState | string }) {
  return (
    <span className={`badge state-${state}`} data-state={state}>
      <span aria-hidden="true">{ICON[state] ?? '•'}</span> {state}
    </span>
  );
}

/** What went wrong with a query or an action, in a sentence the operator can act on. */
export function ErrorBox({ error }: { error: unknown }) {
  if (!error) return null;
  if (error instanceof ApiFailure) {
    let hint = '';
    if (error.code === 'query_timeout')
      hint = ' The database took too long; the UI gives up rather than load it further.';
    else if (error.status === 401) hint = ' Sign in again (reload the page).';
    else if (error.code === 'read_only') hint = ' This UI is read-only.';
    else if (error.status === 403) hint = ' You are not allowed to do this.';
    return (
      <div className="error-box" role="alert" data-code={error.code}>
        <strong>{error.status ? `${error.status} ${error.code}` : 'network'}</strong>:{' '}
        {error.message}
        {hint}
      </div>
    );
  }
  return (
    <div className="error-box" role="alert">
      {String(error)}
    </div>
  );
}

/** The title row of a page, with optional actions on the right. */
export function PageHeader({ title, children }: { title: ReactNode; children?: ReactNode }) {
  return (
    <div className="page-header">
      <h1>{title}</h1>
      <div className="page-actions">{children}</div>
    </div>
  );
}

/** A card with a title. */
export function Card({
  title,
  children,
  className,
}: {
  title?: ReactNode;
  children: ReactNode;
  className?: string;
}) {
  return (
    <section className={`card ${className ?? ''}`}>
      {title ? <h2>{title}</h2> : null}
      {children}
    </section>
  );
}

/** Nothing to show, said plainly. */
export const Empty = ({ children }: { children: ReactNode }) => <p className="empty">{children}</p>;

/** The sentence a retry's confirmation carries (the server sends the same as its `notice`). */
export const Notice = () => (
  <p className="notice" data-testid="retry-notice">
    {RETRY_NOTICE}
  </p>
);

/**
 * A modal confirmation (native <dialog>): `onConfirm` runs on the confirm button; while `busy`
 * the confirm button is disabled and the other one reads "Stop" (`onClose` decides what that
 * means); `children` say what will happen.
 */
export function ConfirmDialog({
  open,
  title,
  confirmLabel,
  danger,
  busy,
  onConfirm,
  onClose,
  children,
}: {
  open: boolean;
  title: string;
  confirmLabel: string;
  danger?: boolean;
  busy?: boolean;
  onConfirm: () => void;
  onClose: () => void;
  children: ReactNode;
}) {
  const ref = useRef<HTMLDialogElement>(null);
  useEffect(() => {
    const d = ref.current;
    if (!d) return;
    if (open && !d.open) d.showModal();
    if (!open && d.open) d.close();
  }, [open]);
  return (
    <dialog
      ref={ref}
      className="dialog"
      onCancel={(e) => {
        // Esc: the dialog stays while an action runs (the button below stops it instead)
        e.preventDefault();
        onClose();
      }}
      aria-label={title}
    >
      <h2>{title}</h2>
      <div className="dialog-body">{children}</div>
      <div className="dialog-buttons">
        <button type="button" onClick={onClose} data-testid="dialog-close">
          {busy ? 'Stop' : 'Close'}
        </button>
        <button
          type="button"
          className={danger ? 'danger' : 'primary'}
          onClick={onConfirm}
          disabled={busy}
          data-testid="confirm"
        >
          {confirmLabel}
        </button>
      </div>
    </dialog>
  );
}
