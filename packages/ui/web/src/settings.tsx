/**
 * The operator's settings (theme, how times show, refresh interval, payloads hidden or not), kept
 * in localStorage, and the live-update switch: polling stops when paused by the button, when the
 * tab is hidden (TanStack Query does not poll in the background), and while a page asks for it
 * (rows selected on the runs page).
 */
import {
  createContext,
  type ReactNode,
  useCallback,
  useContext,
  useEffect,
  useMemo,
  useState,
} from 'react';
import { config } from './config.ts';

/** The colour theme: follow the system, or fixed. */
export type Theme = 'system' | 'light' | 'dark';
/** How times show: in the browser's zone, in UTC, or relative to now ("3 min ago"). */
export type TimeMode = 'local' | 'utc' | 'relative';

/** What the settings page stores. */
export interface Settings {
  theme: Theme;
  time: TimeMode;
  /** Polling interval, ms. */
  refreshMs: number;
  hidePayloads: boolean;
}

const KEY = 'cyclone-ui:settings';

function load(): Settings {
  const defaults: Settings = {
    theme: 'system',
    time: 'local',
    refreshMs: config.refreshMs > 0 ? config.refreshMs : 3000,
    hidePayloads: config.hidePayloadsByDefault,
  };
  try {
    const raw = localStorage.getItem(KEY);
    return raw ? { ...defaults, ...(JSON.parse(raw) as Partial<Settings>) } : defaults;
  } catch {
    return defaults;
  }
}

interface SettingsState {
  settings: Settings;
  update: (patch: Partial<Settings>) => void;
  /** Paused by the pause button. */
  paused: boolean;
  setPaused: (paused: boolean) => void;
}

const SettingsContext = createContext<SettingsState | null>(null);

/** The resolved theme, applied as `data-theme` on <html> (the CSS variables follow it). */
function applyTheme(theme: Theme): void {
  const dark =
    theme === 'dark' ||
    (theme === 'system' && window.matchMedia('(prefers-color-scheme: dark)').matches);
  document.documentElement.dataset.theme = dark ? 'dark' : 'light';
}

/** Provides the settings to the pages, and applies the theme (following the system live). */
export function SettingsProvider({ children }: { children: ReactNode }) {
  const [settings, setSettings] = useState<Settings>(load);
  const [paused, setPaused] = useState(false);

  useEffect(() => {
    applyTheme(settings.theme);
    if (settings.theme !== 'system') return;
    const mq = window.matchMedia('(prefers-color-scheme: dark)');
    const onChange = () => applyTheme('system');
    mq.addEventListener('change', onChange);
    return () => mq.removeEventListener('change', onChange);
  }, [settings.theme]);

  const update = useCallback((patch: Partial<Settings>) => {
    setSettings((old) => {
      const next = { ...old, ...patch };
      try {
        localStorage.setItem(KEY, JSON.stringify(next));
      } catch {
        // storage full or denied: the setting lasts for this page only
      }
      return next;
    });
  }, []);

  const value = useMemo(
    () => ({ settings, update, paused, setPaused }),
    [settings, update, paused],
  );
  return <SettingsContext.Provider value={value}>{children}</SettingsContext.Provider>;
}

/** The settings and the pause switch. */
export function useSettings(): SettingsState {
  const s = useContext(SettingsContext);
  if (!s) throw new Error('useSettings outside SettingsProvider');
  return s;
}

/**
 * The `refetchInterval` for a query: false while paused (button, or `hold` — e.g. rows selected),
 * else the settings' interval times `factor` (slower pages poll less).
 */
export function usePoll(factor = 1, hold = false): number | false {
  const { settings, paused } = useSettings();
  if (paused || hold || settings.refreshMs <= 0) return false;
  return Math.round(settings.refreshMs * factor);
}
