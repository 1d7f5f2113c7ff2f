/** Stand-in for k6's `k6/execution`: aborting the test throws. */
export default {
  test: {
    abort(message: string): never {
      throw new Error(`test aborted: ${message}`);
    },
  },
};
