import { describe, expect, it } from 'vitest';
import { anyOf, basicAuth, bearerToken, isAuthorized, rightsOf } from '../src/auth.js';

const basic = (user: string, password: string) =>
  `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}`;
const req = (authorization?: string) =>
  new Request('http://127.0.0.1/api/meta', {
    headers: authorization ? { authorization } : {},
  });

describe('basicAuth', () => {
  const hook = basicAuth('ops', 'pa:ss wörd');

  it('lets the right user and password in, with every right', async () => {
    const answer = await hook(req(basic('ops', 'pa:ss wörd')));
    expect(answer).toEqual({ user: 'ops' });
    expect(isAuthorized(answer)).toBe(true);
    expect(rightsOf({ user: 'ops' })).toEqual({
      retry: true,
      cancel: true,
      signal: true,
      schedules: true,
    });
  });

  it('refuses a wrong password, a wrong user and no header with 401 and a Basic challenge', async () => {
    for (const header of [
      basic('ops', 'nope'),
      basic('root', 'pa:ss wörd'),
      undefined,
      'Basic !!',
    ]) {
      const answer = await hook(req(header));
      expect(isAuthorized(answer)).toBe(false);
      expect(answer).toMatchObject({
        refuse: 401,
        challenge: 'Basic realm="Cyclone", charset="UTF-8"',
      });
    }
  });

  it('grants only the rights set true when `can` is given', async () => {
    const limited = basicAuth('viewer', 'x', { can: { retry: true } });
    const answer = await limited(req(basic('viewer', 'x')));
    expect(isAuthorized(answer) && rightsOf(answer)).toEqual({
      retry: true,
      cancel: false,
      signal: false,
      schedules: false,
    });
  });

  it('refuses empty credentials and a colon in the user name at construction', () => {
    expect(() => basicAuth('', 'x')).toThrow(TypeError);
    expect(() => basicAuth('a:b', 'x')).toThrow(TypeError);
  });
});

describe('bearerToken', () => {
  const hook = bearerToken('s3cret-token', { user: 'proxy' });

  it('lets the right token in as its user', async () => {
    expect(await hook(req('Bearer s3cret-token'))).toEqual({ user: 'proxy' });
  });

  it('refuses another token with 401 and a Bearer challenge', async () => {
    expect(await hook(req('Bearer s3cret-tokem'))).toMatchObject({
      refuse: 401,
      challenge: 'Bearer realm="Cyclone"',
    });
    expect(await hook(req(basic('proxy', 's3cret-token')))).toMatchObject({ refuse: 401 });
  });
});

describe('anyOf', () => {
  it('takes the first hook that lets in, else answers the first refusal', async () => {
    const hook = anyOf(basicAuth('ops', 'pw'), bearerToken('tok'));
    expect(await hook(req('Bearer tok'))).toEqual({ user: 'token' });
    expect(await hook(req(basic('ops', 'pw')))).toEqual({ user: 'ops' });
    expect(await hook(req())).toMatchObject({
      refuse: 401,
      challenge: expect.stringMatching(/^Basic/),
    });
  });
});
