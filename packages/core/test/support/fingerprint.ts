/**
 * "The database is unchanged": a fingerprint of everything a test database holds — its schemas,
 * and for every table outside the system catalogs its row count and an MD5 checksum of its rows
 * (as text, sorted) — to compare before and after a batch of bad inputs.
 */
import type pg from 'pg';

export interface Fingerprint {
  schemas: string[];
  tables: Record<string, { rows: number; md5: string }>;
}

export async function fingerprint(pool: pg.Pool): Promise<Fingerprint> {
  const schemas = await pool.query<{ nspname: string }>(
    `SELECT nspname FROM pg_namespace
     WHERE nspname NOT LIKE 'pg\\_%' AND nspname <> 'information_schema' ORDER BY 1`,
  );
  const tables = await pool.query<{ schema: string; name: string; ident: string }>(
    `SELECT n.nspname AS schema, c.relname AS name,
            format('%I.%I', n.nspname, c.relname) AS ident
     FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE c.relkind = 'r' AND n.nspname NOT LIKE 'pg\\_%' AND n.nspname <> 'information_schema'
     ORDER BY 1, 2`,
  );
  const out: Fingerprint = { schemas: schemas.rows.map((r) => r.nspname), tables: {} };
  for (const t of tables.rows) {
    // `ident` comes from the catalog through format('%I'): a quoted identifier, not input.
    const { rows } = await pool.query<{ n: number; md5: string | null }>(
      `SELECT count(*)::int AS n, md5(coalesce(string_agg(t::text, '|' ORDER BY t::text), ''))
         AS md5 FROM ${t.ident} AS t`,
    );
    out.tables[`${t.schema}.${t.name}`] = { rows: rows[0]?.n ?? 0, md5: rows[0]?.md5 ?? '' };
  }
  return out;
}
