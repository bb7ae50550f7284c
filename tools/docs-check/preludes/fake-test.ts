// Prelude of samples from a test that uses a provider fake: values of the surrounding test.
declare const url: string;
declare const appOrigin: string;
declare const to: string;
declare const from: string;
declare const body: string;
