/**
 * A run's DAG (loaded lazily: @xyflow/react and dagre stay out of the first page load). Nodes are
 * laid out top to bottom by dagre, once per set of nodes and edges; each card shows the node, its
 * action (a wait node: its signal's name), its state (icon + word + colour), attempt n/max,
 * duration or what it waits for (upstream nodes, a signal), and
 * badges for errors and for the ledger's provider calls (a red one for an unknown outcome).
 * Clicking a card opens the node panel.
 */
import { Graph, layout } from '@dagrejs/dagre';
import {
  Background,
  Controls,
  type Edge,
  Handle,
  MarkerType,
  MiniMap,
  type Node,
  type NodeProps,
  Position,
  ReactFlow,
  type ReactFlowInstance,
} from '@xyflow/react';
import '@xyflow/react/dist/style.css';
import { memo, useEffect, useMemo, useRef, useState } from 'react';
import type { StepSummary } from '../../../src/shared/api.ts';
import { StateBadge } from '../components/common.tsx';
import { formatDuration, stepDuration } from '../format.tsx';

const W = 220;
const H = 92;

type StepNode = Node<{ step: StepSummary; selected: boolean }, 'step'>;

/** States in which a wait node waits for its signal (it is reached and not finished). */
const WAITING = new Set(['available', 'scheduled', 'running', 'retryable']);

function Detail({ step }: { step: StepSummary }) {
  if (step.state === 'pending') return <span>waiting for {step.depsRemaining} upstream</span>;
  if (step.waitFor !== null && WAITING.has(step.state)) {
    return (
      <span
        className="ellipsis"
        data-testid="wait-for"
        title={`waiting for signal ${step.waitFor}`}
      >
        waiting for <span className="mono">{step.waitFor}</span>
      </span>
    );
  }
  const d = stepDuration(step);
  return <span>{d == null ? '—' : formatDuration(d)}</span>;
}

const StepCard = memo(function StepCard({ data }: NodeProps<StepNode>) {
  const { step, selected } = data;
  const l = step.ledger;
  return (
    <div
      className={`dag-node state-${step.state}${selected ? ' selected' : ''}`}
      data-testid={`dag-node-${step.node}`}
      data-state={step.state}
      title={step.lastError ?? step.node}
    >
      <Handle type="target" position={Position.Top} isConnectable={false} />
      <div className="dag-node-title">
        <strong>{step.node}</strong>
        {/* A wait node's action is always $wait: its signal's name tells it apart. */}
        <span
          className="muted small ellipsis"
          title={step.waitFor === null ? step.action : `waits for signal ${step.waitFor}`}
        >
          {step.waitFor === null ? step.action : `signal ${step.waitFor}`}
        </span>
      </div>
      <div className="dag-node-row">
        <StateBadge state={step.state} />
        <span className="small" data-testid="attempts">
          {step.attempt}/{step.maxAttempts}
        </span>
      </div>
      <div className="dag-node-row small">
        <Detail step={step} />
        <span className="dag-badges">
          {step.errorCount > 0 ? (
            <span className="pill bad" title={`${step.errorCount} failed attempt(s)`}>
              ✕ {step.errorCount}
            </span>
          ) : null}
          {l.unknown > 0 ? (
            <span className="pill bad" title="provider call with an unknown outcome">
              ? {l.unknown}
            </span>
          ) : null}
          {l.started > 0 ? (
            <span className="pill warn" title="provider call in flight">
              … {l.started}
            </span>
          ) : null}
          {l.succeeded + l.failed > 0 ? (
            <span
              className="pill info"
              title={`ledger: ${l.succeeded} succeeded, ${l.failed} failed provider call(s)`}
            >
              ⛁ {l.succeeded + l.failed}
            </span>
          ) : null}
        </span>
      </div>
      <Handle type="source" position={Position.Bottom} isConnectable={false} />
    </div>
  );
});

const nodeTypes = { step: StepCard };
const FIT = { padding: 0.15, maxZoom: 1.2 };

/** Positions (top-left corners) of the nodes, by dagre. */
function place(steps: StepSummary[]): Map<string, { x: number; y: number }> {
  const g = new Graph();
  g.setGraph({ rankdir: 'TB', nodesep: 30, ranksep: 50 });
  g.setDefaultEdgeLabel(() => ({}));
  const known = new Set(steps.map((s) => s.node));
  for (const s of steps) g.setNode(s.node, { width: W, height: H });
  for (const s of steps) for (const up of s.upstream) if (known.has(up)) g.setEdge(up, s.node);
  layout(g);
  const out = new Map<string, { x: number; y: number }>();
  for (const s of steps) {
    const n = g.node(s.node);
    out.set(s.node, { x: (n?.x ?? 0) - W / 2, y: (n?.y ?? 0) - H / 2 });
  }
  return out;
}

/** The graph of `steps`; `onSelect` gets the clicked node's name. */
export default function Dag({
  steps,
  selected,
  onSelect,
}: {
  steps: StepSummary[];
  selected: string | undefined;
  onSelect: (node: string) => void;
}) {
  // Layout depends only on the shape (nodes and edges), not on states that change every poll.
  const shape = steps.map((s) => `${s.node}<${s.upstream.join(',')}`).join('|');
  // biome-ignore lint/correctness/useExhaustiveDependencies: keyed by the shape on purpose
  const positions = useMemo(() => place(steps), [shape]);
  const box = useRef<HTMLDivElement>(null);
  const [flow, setFlow] = useState<ReactFlowInstance<StepNode, Edge> | null>(null);

  // Fit again when the box changes size (the node panel opening beside it) or the shape changes.
  // biome-ignore lint/correctness/useExhaustiveDependencies: refit on a new shape too
  useEffect(() => {
    const el = box.current;
    if (!el || !flow) return;
    const fit = () => void flow.fitView(FIT);
    fit();
    const ro = new ResizeObserver(fit);
    ro.observe(el);
    return () => ro.disconnect();
  }, [flow, shape]);

  const nodes: StepNode[] = steps.map((s) => ({
    id: s.node,
    type: 'step',
    position: positions.get(s.node) ?? { x: 0, y: 0 },
    data: { step: s, selected: s.node === selected },
    draggable: false,
    connectable: false,
    width: W,
    height: H,
  }));
  const known = new Set(steps.map((s) => s.node));
  const edges: Edge[] = steps.flatMap((s) =>
    s.upstream
      .filter((up) => known.has(up))
      .map((up) => ({
        id: `${up}->${s.node}`,
        source: up,
        target: s.node,
        markerEnd: { type: MarkerType.ArrowClosed },
        animated: s.state === 'running',
      })),
  );

  return (
    <div className="dag" data-testid="dag" ref={box}>
      <ReactFlow
        nodes={nodes}
        edges={edges}
        nodeTypes={nodeTypes}
        onNodeClick={(_e, n) => onSelect(n.id)}
        onInit={setFlow}
        fitView
        fitViewOptions={FIT}
        minZoom={0.1}
        nodesDraggable={false}
        nodesConnectable={false}
        onlyRenderVisibleElements={steps.length > 100}
        colorMode={document.documentElement.dataset.theme === 'dark' ? 'dark' : 'light'}
      >
        <Background />
        <Controls showInteractive={false} />
        {steps.length > 12 ? <MiniMap pannable zoomable /> : null}
      </ReactFlow>
    </div>
  );
}
