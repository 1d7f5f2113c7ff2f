/** Stand-in for k6's `Trend`: samples recorded by metric name. */
export const samples: Record<string, number[]> = {};

export class Trend {
  constructor(readonly name: string) {}

  add(value: number): void {
    (samples[this.name] ??= []).push(value);
  }
}
