/**
 * Entry of the operator pages: the query client (polling per page, no refetch on focus — the
 * pause button must hold, and polling covers freshness), the router under the runtime base path,
 * and the settings.
 */
import { QueryClient, QueryClientProvider } from '@tanstack/react-query';
import { StrictMode } from 'react';
import { createRoot } from 'react-dom/client';
import { Router } from 'wouter';
import { App } from './App.tsx';
import { config } from './config.ts';
import { retryQuery } from './retry.ts';
import { SettingsProvider } from './settings.tsx';
import './styles.css';

const queryClient = new QueryClient({
  defaultOptions: {
    queries: {
      refetchOnWindowFocus: false,
      refetchOnReconnect: false,
      refetchIntervalInBackground: false,
      // A server's answer shows at once (a statement timeout as the banner); polling asks again.
      retry: retryQuery,
      staleTime: 1_000,
    },
  },
});

const root = document.getElementById('root');
if (root) {
  createRoot(root).render(
    <StrictMode>
      <QueryClientProvider client={queryClient}>
        <SettingsProvider>
          <Router base={config.basePath}>
            <App />
          </Router>
        </SettingsProvider>
      </QueryClientProvider>
    </StrictMode>,
  );
}
