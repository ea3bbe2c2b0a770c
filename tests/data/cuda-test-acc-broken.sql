ggml_cuda_init: found 1 CUDA devices (Total VRAM: 143155 MiB):
  Device 0: NVIDIA H200, compute capability 9.0, VMM: yes, VRAM: 143155 MiB
CREATE TABLE IF NOT EXISTS test_backend_ops (
  test_time TEXT,
  build_commit TEXT,
  backend_name TEXT,
  op_name TEXT,
  op_params TEXT,
  test_mode TEXT,
  supported INTEGER,
  passed INTEGER,
  error_message TEXT,
  time_us REAL,
  flops REAL,
  bandwidth_gb_s REAL,
  memory_kb INTEGER,
  n_runs INTEGER,
  device_description TEXT,
  backend_reg_name TEXT
);

[ACC] ERR = 1.669283467 > 0.000000100 INSERT INTO test_backend_ops (test_time, build_commit, backend_name, op_name, op_params, test_mode, supported, passed, error_message, time_us, flops, bandwidth_gb_s, memory_kb, n_runs, device_description, backend_reg_name) VALUES ('2026-11-29T19:41:08Z', 'unknown', 'CUDA0', 'ACC', 'type=f32,ne_a=[256,17,1,1],ne_b=[256,16,1,1],stride_dim=-1', 'test', '1', '0', 'test failed', '0.000000', '0.000000', '0.000000', '0', '0', '', '');
[ACC] ERR = 1.726306053 > 0.000000100 INSERT INTO test_backend_ops (test_time, build_commit, backend_name, op_name, op_params, test_mode, supported, passed, error_message, time_us, flops, bandwidth_gb_s, memory_kb, n_runs, device_description, backend_reg_name) VALUES ('2026-11-29T19:41:08Z', 'unknown', 'CUDA0', 'ACC', 'type=f32,ne_a=[256,17,2,3],ne_b=[256,16,2,3],stride_dim=-1', 'test', '1', '0', 'test failed', '0.000000', '0.000000', '0.000000', '0', '0', '', '');
[ACC] ERR = 1.619169895 > 0.000000100 INSERT INTO test_backend_ops (test_time, build_commit, backend_name, op_name, op_params, test_mode, supported, passed, error_message, time_us, flops, bandwidth_gb_s, memory_kb, n_runs, device_description, backend_reg_name) VALUES ('2026-11-29T19:41:08Z', 'unknown', 'CUDA0', 'ACC', 'type=f32,ne_a=[256,17,2,3],ne_b=[128,16,2,3],stride_dim=-1', 'test', '1', '0', 'test failed', '0.000000', '0.000000', '0.000000', '0', '0', '', '');
INSERT INTO test_backend_ops (test_time, build_commit, backend_name, op_name, op_params, test_mode, supported, passed, error_message, time_us, flops, bandwidth_gb_s, memory_kb, n_runs, device_description, backend_reg_name) VALUES ('2026-11-29T19:41:08Z', 'unknown', 'CUDA0', 'ACC', 'type=f32,ne_a=[256,17,2,3],ne_b=[256,16,2,3],stride_dim=1', 'test', '0', '0', 'not supported', '0.000000', '0.000000', '0.000000', '0', '0', '', '');
INSERT INTO test_backend_ops (test_time, build_commit, backend_name, op_name, op_params, test_mode, supported, passed, error_message, time_us, flops, bandwidth_gb_s, memory_kb, n_runs, device_description, backend_reg_name) VALUES ('2026-11-29T19:41:08Z', 'unknown', 'CUDA0', 'ACC', 'type=f32,ne_a=[256,17,2,3],ne_b=[128,16,2,3],stride_dim=2', 'test', '0', '0', 'not supported', '0.000000', '0.000000', '0.000000', '0', '0', '', '');
[ACC] ERR = 1.552130421 > 0.000000100 INSERT INTO test_backend_ops (test_time, build_commit, backend_name, op_name, op_params, test_mode, supported, passed, error_message, time_us, flops, bandwidth_gb_s, memory_kb, n_runs, device_description, backend_reg_name) VALUES ('2026-11-29T19:41:08Z', 'unknown', 'CUDA0', 'ACC', 'type=f32,ne_a=[256,17,2,3],ne_b=[64,16,2,3],stride_dim=3', 'test', '1', '0', 'test failed', '0.000000', '0.000000', '0.000000', '0', '0', '', '');
[ACC] ERR = 1.334447756 > 0.000000100 INSERT INTO test_backend_ops (test_time, build_commit, backend_name, op_name, op_params, test_mode, supported, passed, error_message, time_us, flops, bandwidth_gb_s, memory_kb, n_runs, device_description, backend_reg_name) VALUES ('2026-11-29T19:41:08Z', 'unknown', 'CUDA0', 'ACC', 'type=f32,ne_a=[4096,2,1,1],ne_b=[1024,1,1,1],stride_dim=-1', 'test', '1', '0', 'test failed', '0.000000', '0.000000', '0.000000', '0', '0', '', '');
[ACC] ERR = 1.599254256 > 0.000000100 INSERT INTO test_backend_ops (test_time, build_commit, backend_name, op_name, op_params, test_mode, supported, passed, error_message, time_us, flops, bandwidth_gb_s, memory_kb, n_runs, device_description, backend_reg_name) VALUES ('2026-11-29T19:41:08Z', 'unknown', 'CUDA0', 'ACC', 'type=f32,ne_a=[4096,3,1,1],ne_b=[4096,1,1,1],stride_dim=-1', 'test', '1', '0', 'test failed', '0.000000', '0.000000', '0.000000', '0', '0', '', '');
INSERT INTO test_backend_ops (test_time, build_commit, backend_name, op_name, op_params, test_mode, supported, passed, error_message, time_us, flops, bandwidth_gb_s, memory_kb, n_runs, device_description, backend_reg_name) VALUES ('2026-11-29T19:41:08Z', 'unknown', 'CUDA0', 'ACC', 'type=f32,ne_a=[4096,1,2,1],ne_b=[2048,1,2,1],stride_dim=1', 'test', '0', '0', 'not supported', '0.000000', '0.000000', '0.000000', '0', '0', '', '');
