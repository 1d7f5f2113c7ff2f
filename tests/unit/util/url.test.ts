import { describe, expect, it } from 'vitest';
import { redactUrl, urlPort } from '../../../src/util/url.js';

describe('redactUrl and urlPort', () => {
  it('hides passwords', () => {
    expect(redactUrl('redis://:secret@host:6380/0')).toBe('redis://:***@host:6380/0');
    expect(redactUrl('rediss://default:secret@cache.example:6380')).toBe('rediss://default:***@cache.example:6380');
    expect(redactUrl('https://key:secret@registry.example/')).toBe('https://key:***@registry.example/');
    expect(redactUrl('postgres://postgres@127.0.0.1:5432/sluice')).toBe('postgres://postgres@127.0.0.1:5432/sluice');
    expect(redactUrl('::nonsense')).toBe('<unparsable URL>');
  });

  it('hides credentials passed as query parameters, keeping the other parameters', () => {
    expect(redactUrl('postgresql://app@db/sluice?sslmode=require&password=secret')).toBe('postgresql://app@db/sluice?sslmode=require&password=***');
    expect(redactUrl('postgresql://app:one@db/sluice?sslpassword=two')).toBe('postgresql://app:***@db/sluice?sslpassword=***');
    expect(redactUrl('https://proxy.example/v1?access_token=abc&client_secret=def&region=eu')).toBe('https://proxy.example/v1?access_token=***&client_secret=***&region=eu');
  });

  it('returns a URL without credentials exactly as given', () => {
    for (const url of ['http://sim:8089', 'redis://127.0.0.1:6379', 'postgresql://postgres@127.0.0.1:5432/sluice?sslmode=disable', 'https://api.anthropic.com']) expect(redactUrl(url)).toBe(url);
  });

  it('replaces text that is not a URL whole, whatever it holds', () => {
    expect(redactUrl('redis://:s3cret@bad host:6379')).toBe('<unparsable URL>');
    expect(redactUrl('')).toBe('<unparsable URL>');
  });

  it('reads the port or falls back to the default', () => {
    expect(urlPort('redis://h:6380', 6379)).toBe(6380);
    expect(urlPort('redis://h', 6379)).toBe(6379);
  });
});
