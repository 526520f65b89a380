"""Test helpers shipped with the library: throwaway servers and failure-injection doubles."""
